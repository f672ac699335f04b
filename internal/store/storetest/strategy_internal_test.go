package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCopyStrategy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ version, want string }{
		{"15.20 (Debian 15.20-0+deb12u1)", " STRATEGY FILE_COPY"},
		{"16beta1", " STRATEGY FILE_COPY"},
		{"17.2", " STRATEGY FILE_COPY"},
		{"14.11", ""},
		{"9.6.24", ""},
		{"", ""},
	} {
		require.Equal(t, tc.want, copyStrategy(tc.version), tc.version)
	}
}
