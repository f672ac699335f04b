package trafficclass_test

import (
	"encoding/json"
	"errors"
	"strings"
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

// FuzzClassify checks that Classify never panics and always names a
// built-in with a reason: the default class when history is short or the
// volume is not a rate, otherwise the band that holds the volume, with a
// warning exactly when the class is Noisy.
func FuzzClassify(f *testing.F) {
	f.Add(400.0, 0.01, 20160)
	f.Add(0.8, 0.25, 20160)
	f.Add(1.0/60, 0.0, 60)
	f.Add(20.0, 0.2, 59)
	f.Fuzz(func(t *testing.T, quietRPS, healthyErrorRate float64, minutes int) {
		m := trafficclass.Measurement{QuietRPS: quietRPS, HealthyErrorRate: healthyErrorRate, Minutes: minutes}
		name, reason := trafficclass.Classify(m, trafficclass.Builtins())
		require.True(t, trafficclass.IsBuiltin(name), name)
		require.NotEmpty(t, reason)
		r, ok := trafficclass.RangeFor(quietRPS)
		if minutes < trafficclass.MinHistoryMinutes || !ok {
			require.Equal(t, trafficclass.DefaultClass, name)
			return
		}
		require.Equal(t, r.Class, name)
		c, _ := trafficclass.Builtin(name)
		require.Equal(t, c.Noisy(healthyErrorRate), strings.Contains(reason, "expect false trips"), reason)
	})
}
