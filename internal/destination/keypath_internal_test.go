package destination

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeyAt(t *testing.T) {
	t.Parallel()
	body := []byte(`{"customer":{"id":"cus_1","n":42,"tags":["a"],"none":null},"top":"x"}`)
	for _, tc := range []struct {
		path string
		want string
		ok   bool
	}{
		{"customer.id", "cus_1", true},
		{"customer.n", "42", true},
		{"customer.tags", `["a"]`, true},
		{"top", "x", true},
		{"customer.none", "", false},
		{"customer.missing", "", false},
		{"top.deeper", "", false},
		{"", "", false},
	} {
		segs, err := parseKeyPath(tc.path)
		require.NoError(t, err)
		got, ok := keyAt(body, segs)
		require.Equal(t, tc.ok, ok, tc.path)
		require.Equal(t, tc.want, string(got), tc.path)
	}
}

func FuzzKeyPath(f *testing.F) {
	f.Add("customer.id", []byte(`{"customer":{"id":"c"}}`))
	f.Add("a..b", []byte(`[]`))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		segs, err := parseKeyPath(path)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(segs), maxKeyPathDepth)
		for _, s := range segs {
			require.NotEmpty(t, s)
		}
		_, _ = keyAt(body, segs)
	})
}
