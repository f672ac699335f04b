package api

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/hookd/hookd/internal/api/openapitest"
	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
)

// TestOpenAPIClassSchemasMatchTrafficclass checks the document's traffic
// class schemas against internal/trafficclass, which decodes and validates
// a class: names and durations agree exactly, the documented defaults are
// the ones Decode fills in, and a generated class body is accepted by the
// document exactly when the server accepts it, but for the two bounds no
// schema states (a window of at least 100ms, max_open_duration at least
// open_duration).
func TestOpenAPIClassSchemasMatchTrafficclass(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDocument)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	schemas := doc.Components.Schemas
	compiled, err := openapitest.New(openAPIDocument, doc)
	require.NoError(t, err)
	accepts := func(schema *openapi3.Schema, v any) bool {
		return compiled.Validate(schema, v) == nil
	}

	t.Run("class name", func(t *testing.T) {
		t.Parallel()
		schema := schemas["ClassName"].Value
		serverAccepts := func(name string) bool {
			err := trafficclass.Default(name).Validate()
			var fes breaker.FieldErrors
			if err != nil {
				require.True(t, errors.As(err, &fes))
				require.Equal(t, "name", fes[0].Field, "only the name can be at fault")
			}
			return err == nil
		}
		// Every string of up to four characters near "auto", then long ones.
		alphabet := []string{"a", "u", "t", "o", "x", "0", "_", "-", "A", "é"}
		words := []string{""}
		for range 4 {
			for _, w := range words {
				for _, c := range alphabet {
					if len([]rune(w)) < 4 {
						words = append(words, w+c)
					}
				}
			}
			words = slices.Compact(slices.Sorted(slices.Values(words)))
		}
		for _, w := range append(words, "autos", "auto-1", "xauto", "auto_", strings.Repeat("a", 64), strings.Repeat("a", 65)) {
			require.Equal(t, serverAccepts(w), accepts(schema, w), "%q: does the document accept it?", w)
		}
		rapid.Check(t, func(rt *rapid.T) {
			n := rapid.SampledFrom([]int{1, 2, 3, 4, 5, 63, 64, 65}).Draw(rt, "len")
			w := rapid.StringOfN(rapid.RuneFrom([]rune("autoz09_-A.")), n, n, -1).Draw(rt, "name")
			if serverAccepts(w) != accepts(schema, w) {
				rt.Fatalf("%q: the document says %v, the server %v", w, accepts(schema, w), serverAccepts(w))
			}
		})
	})

	// durations draws duration-like strings: one to three numbers with a
	// unit each, some signed, some broken.
	durations := rapid.Custom(func(rt *rapid.T) string {
		var b strings.Builder
		b.WriteString(rapid.SampledFrom([]string{"", "", "", "+", "-"}).Draw(rt, "sign"))
		for i := range rapid.IntRange(1, 3).Draw(rt, "parts") {
			b.WriteString(rapid.SampledFrom([]string{"0", "1", "5", "10", "1.5", ".5", "5.", "007", "0.0", ".", ""}).Draw(rt, "number"+string(rune('0'+i))))
			b.WriteString(rapid.SampledFrom([]string{"ns", "us", "µs", "μs", "ms", "s", "m", "h", "", "x", "S", "sec", " s"}).Draw(rt, "unit"+string(rune('0'+i))))
		}
		return b.String()
	})
	for _, tc := range []struct {
		schema string
		// server reports whether the server accepts a duration d parsed
		// from s for a member of this schema.
		server func(d time.Duration) bool
	}{
		{"Duration", func(d time.Duration) bool { return d >= 0 }},
		{"PositiveDuration", func(d time.Duration) bool { return d > 0 }},
	} {
		t.Run(tc.schema, func(t *testing.T) {
			t.Parallel()
			schema := schemas[tc.schema].Value
			check := func(t require.TestingT, s string) {
				d, err := time.ParseDuration(s)
				server := err == nil && tc.server(d)
				if strings.HasPrefix(s, "-") {
					// The document refuses a minus sign even on a zero,
					// which the server reads as 0.
					require.False(t, accepts(schema, s), "%q", s)
					return
				}
				if err == nil && d == 0 && strings.Contains(s, ".") {
					// A fraction of a nanosecond is 0; the pattern cannot
					// tell, so it counts the digits.
					return
				}
				require.Equal(t, server, accepts(schema, s), "%q: parsed as %v, %v", s, d, err)
			}
			for _, s := range []string{"0", "+0", "0s", "30s", "500ms", "1h30m", "1.5µs", "2h45m30.5s", "", "30", "1d", "s", " 1s", "1s "} {
				check(t, s)
			}
			rapid.Check(t, func(rt *rapid.T) { check(rt, durations.Draw(rt, "duration")) })
		})
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		raw, err := trafficclass.Default("x").MarshalJSON()
		require.NoError(t, err)
		var want map[string]any
		require.NoError(t, json.Unmarshal(raw, &want))
		props := schemas["TrafficClassFields"].Value.Properties
		require.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(props)), "the members of a class")
		require.ElementsMatch(t, slices.Collect(maps.Keys(want)), schemas["TrafficClassConfig"].Value.Required, "every member is in a response")
		for name, prop := range props {
			if name == "name" || name == "builtin" {
				require.Nil(t, prop.Value.Default, "%s has no default", name)
				continue
			}
			require.Equal(t, want[name], prop.Value.Default, "the default of %s", name)
		}
	})

	t.Run("class body", func(t *testing.T) {
		t.Parallel()
		schema := schemas["CreateTrafficClassRequest"].Value
		members := map[string][]any{
			"trip":                        {"rate", "consecutive", "sometimes", nil},
			"failure_rate_threshold":      {0.5, 1, 0.0001, 0, 1.01, -0.5, "0.5"},
			"window":                      {"30s", "100ms", "1h", "99ms", "50ms", "0s", "-1s", "soon", 30},
			"min_throughput":              {1, 20, 0, -1, 1.5, "20"},
			"consecutive_failures":        {1, 5, 0},
			"open_duration":               {"30s", "1ms", "1m", "0s", "2h"},
			"open_jitter":                 {0, 0.3, 1, 1.5, -0.1},
			"open_backoff":                {1, 2, 0.5, 0},
			"max_open_duration":           {"10m", "1ms", "30s", "1m", "0s"},
			"half_open_trials":            {1, 3, 0},
			"half_open_concurrency":       {1, 2, 0},
			"enforce":                     {true, false, "yes", nil},
			"auth_disable_after":          {1, 10, 0},
			"auth_disable_min_duration":   {"0s", "5m", "0", "-1s", "5 min"},
			"auto_tune":                   {"off", "recommend", "apply", "always", "", nil},
			"tune_min_throughput_floor":   {1, 50, 0, -1, 1.5},
			"tune_min_throughput_ceiling": {1, 40, 10000, 0, 1.5},
			"tune_failure_rate_floor":     {0, 0.3, 1, 1.2, -0.1, "0.3"},
			"tune_failure_rate_ceiling":   {0, 0.2, 1, 1.2, -0.1},
			"builtin":                     {true, false},
			"colour":                      {"red"},
			"Window":                      {"30s"},
		}
		names := slices.Sorted(maps.Keys(members))
		// What the document cannot see.
		blind := map[string]string{"window": "must be at least 100ms", "max_open_duration": "must be at least open_duration",
			"tune_min_throughput_ceiling": "must be at least 1 and tune_min_throughput_floor",
			"tune_failure_rate_ceiling":   "must be at least tune_failure_rate_floor"}
		rapid.Check(t, func(rt *rapid.T) {
			body := map[string]any{"name": rapid.SampledFrom([]any{"custom", "custom", "custom", "auto", "Bad", ""}).Draw(rt, "name")}
			for _, name := range names {
				if rapid.IntRange(0, 2).Draw(rt, "has "+name) == 0 {
					body[name] = rapid.SampledFrom(members[name]).Draw(rt, name)
				}
			}
			raw, err := json.Marshal(body)
			require.NoError(rt, err)
			var asJSON any
			require.NoError(rt, json.Unmarshal(raw, &asJSON))
			docOK := accepts(schema, asJSON)
			_, err = trafficclass.Decode(raw)
			var fes breaker.FieldErrors
			require.True(rt, err == nil || errors.As(err, &fes), "%v", err)
			if err == nil && !docOK {
				rt.Fatalf("%s: the server accepts it, the document does not", raw)
			}
			if err != nil && docOK {
				for _, fe := range fes {
					if blind[fe.Field] != fe.Message {
						rt.Fatalf("%s: the document accepts it, the server says %s %s", raw, fe.Field, fe.Message)
					}
				}
			}
		})
	})
}
