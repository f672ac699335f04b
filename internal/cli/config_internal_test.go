package cli

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUserConfigDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		goos string
		env  map[string]string
		want string
		err  bool
	}{
		{"linux", map[string]string{"XDG_CONFIG_HOME": "/x/cfg", "HOME": "/home/u"}, "/x/cfg", false},
		{"linux", map[string]string{"HOME": "/home/u"}, filepath.Join("/home/u", ".config"), false},
		{"linux", map[string]string{"XDG_CONFIG_HOME": "rel"}, "", true},
		{"linux", map[string]string{}, "", true},
		{"darwin", map[string]string{"HOME": "/Users/u"}, filepath.Join("/Users/u", "Library", "Application Support"), false},
		{"windows", map[string]string{"AppData": `C:\Users\u\AppData\Roaming`}, `C:\Users\u\AppData\Roaming`, false},
	} {
		got, err := userConfigDir(tc.goos, func(k string) string { return tc.env[k] })
		if tc.err {
			require.Error(t, err, "%s %v", tc.goos, tc.env)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%s %v", tc.goos, tc.env)
	}
}
