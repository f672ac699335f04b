package trafficclass_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
)

// FuzzDecode checks that Decode never panics, and that any class it accepts
// validates, re-encodes, and decodes back to the same class and the same
// bytes.
func FuzzDecode(f *testing.F) {
	for _, c := range trafficclass.Builtins() {
		data, err := json.Marshal(c)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte(`{"name":"bulk"}`))
	f.Add([]byte(`{"name":"bulk","window":"500ms","open_duration":"1.5s","enforce":false}`))
	f.Add([]byte(`{"name":"bulk","trip":"consecutive","consecutive_failures":3,"builtin":true}`))
	f.Add([]byte(`{"name":"auto","window":30,"min_throughput":0.5,"nope":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := trafficclass.Decode(data)
		if err != nil {
			require.NotEmpty(t, err.Error())
			var fields breaker.FieldErrors
			if errors.As(err, &fields) {
				require.NotEmpty(t, fields)
			}
			return
		}
		require.NoError(t, c.Validate())
		require.Equal(t, trafficclass.IsBuiltin(c.Name), c.Builtin)
		out, err := json.Marshal(c)
		require.NoError(t, err)
		again, err := trafficclass.Decode(out)
		require.NoError(t, err, "%s", out)
		require.Equal(t, c, again)
		out2, err := json.Marshal(again)
		require.NoError(t, err)
		require.Equal(t, string(out), string(out2))
	})
}
