package trafficclass_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
)

func TestMarshalJSONShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		class string
		want  string
	}{
		{"high", `{"name":"high","trip":"rate","failure_rate_threshold":0.5,"window":"5s",` +
			`"min_throughput":50,"consecutive_failures":5,"open_duration":"15s","open_jitter":0.3,` +
			`"open_backoff":2,"max_open_duration":"2m","half_open_trials":3,"half_open_concurrency":1,` +
			`"enforce":true,"auth_disable_after":10,"auth_disable_min_duration":"5m","tenant_selectable":false,` +
			`"auto_tune":"recommend","tune_min_throughput_floor":1,"tune_min_throughput_ceiling":10000,` +
			`"tune_failure_rate_floor":0,"tune_failure_rate_ceiling":1,"builtin":true}`},
		{"low", `{"name":"low","trip":"rate","failure_rate_threshold":0.6,"window":"10m",` +
			`"min_throughput":10,"consecutive_failures":5,"open_duration":"30s","open_jitter":0.3,` +
			`"open_backoff":2,"max_open_duration":"2m","half_open_trials":3,"half_open_concurrency":1,` +
			`"enforce":true,"auth_disable_after":10,"auth_disable_min_duration":"5m","tenant_selectable":false,` +
			`"auto_tune":"recommend","tune_min_throughput_floor":1,"tune_min_throughput_ceiling":10000,` +
			`"tune_failure_rate_floor":0,"tune_failure_rate_ceiling":1,"builtin":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			t.Parallel()
			c, ok := trafficclass.Builtin(tt.class)
			require.True(t, ok)
			got, err := json.Marshal(c)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(got))
			require.Equal(t, tt.want, string(got), "members in field order")
		})
	}
}

func TestMarshalJSONHasExactlyTheContractMembers(t *testing.T) {
	t.Parallel()
	data, err := json.Marshal(trafficclass.Default("bulk"))
	require.NoError(t, err)
	var members map[string]any
	require.NoError(t, json.Unmarshal(data, &members))
	want := []string{
		"name", "trip", "failure_rate_threshold", "window", "min_throughput", "consecutive_failures",
		"open_duration", "open_jitter", "open_backoff", "max_open_duration", "half_open_trials",
		"half_open_concurrency", "enforce", "auth_disable_after", "auth_disable_min_duration", "tenant_selectable",
		"auto_tune", "tune_min_throughput_floor", "tune_min_throughput_ceiling", "tune_failure_rate_floor",
		"tune_failure_rate_ceiling", "builtin",
	}
	require.Len(t, members, len(want))
	for _, name := range want {
		require.Contains(t, members, name)
	}
}

func TestMarshalJSONRejectsInfinity(t *testing.T) {
	t.Parallel()
	c := trafficclass.Default("bulk")
	c.Breaker.OpenBackoff = math.Inf(1)
	_, err := json.Marshal(c)
	require.ErrorContains(t, err, `encode traffic class "bulk"`)
}

func TestBuiltinsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range trafficclass.Builtins() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			data, err := json.Marshal(c)
			require.NoError(t, err)
			got, err := trafficclass.Decode(data)
			require.NoError(t, err)
			require.Equal(t, c, got)

			var viaUnmarshal trafficclass.Class
			require.NoError(t, json.Unmarshal(data, &viaUnmarshal))
			require.Equal(t, c, viaUnmarshal)
		})
	}
}

func TestDecodeFillsOmittedFieldsWithDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want func() trafficclass.Class
	}{
		{"only a name", `{"name":"bulk"}`, func() trafficclass.Class { return trafficclass.Default("bulk") }},
		{"one field", `{"name":"bulk","window":"2m"}`, func() trafficclass.Class {
			c := trafficclass.Default("bulk")
			c.Breaker.Window = 2 * time.Minute
			return c
		}},
		{"shadow mode", `{"name":"bulk","enforce":false}`, func() trafficclass.Class {
			c := trafficclass.Default("bulk")
			c.Enforce = false
			return c
		}},
		{"selectable by tenants", `{"name":"bulk","tenant_selectable":true}`, func() trafficclass.Class {
			c := trafficclass.Default("bulk")
			c.TenantSelectable = true
			return c
		}},
		{"a PUT of a built-in replaces it wholesale", `{"name":"high","min_throughput":80}`, func() trafficclass.Class {
			c := trafficclass.Default("high") // breaker.DefaultConfig(), not high's shipped numbers
			c.Breaker.MinThroughput = 80
			return c
		}},
		{"whitespace around the object", " \n{\"name\":\"bulk\"}\n ", func() trafficclass.Class { return trafficclass.Default("bulk") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := trafficclass.Decode([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want(), got)
		})
	}
	c, err := trafficclass.Decode([]byte(`{"name":"bulk"}`))
	require.NoError(t, err)
	require.Equal(t, breaker.DefaultConfig(), c.Breaker)
	require.True(t, c.Enforce)
	require.Equal(t, 10, c.AuthDisableAfter)
	require.Equal(t, 5*time.Minute, c.AuthDisableMinDuration)
	require.False(t, c.TenantSelectable, "no class is a tenant's to pick unless an admin says so")
	require.False(t, c.Builtin)
}

func TestDecodeIgnoresBuiltin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{`{"name":"bulk","builtin":true}`, false},
		{`{"name":"bulk","builtin":"yes"}`, false},
		{`{"name":"bulk","builtin":null}`, false},
		{`{"name":"medium","builtin":false}`, true},
		{`{"name":"medium"}`, true},
	}
	for _, tt := range tests {
		c, err := trafficclass.Decode([]byte(tt.in))
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, c.Builtin, tt.in)
	}
}

func TestDecodeDurations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"500ms", 500 * time.Millisecond, "500ms"},
		{"0.5s", 500 * time.Millisecond, "500ms"},
		{"1.5s", 1500 * time.Millisecond, "1.5s"},
		{"100ms", 100 * time.Millisecond, "100ms"},
		{"90s", 90 * time.Second, "1m30s"},
		{"5m", 5 * time.Minute, "5m"},
		{"5m0s", 5 * time.Minute, "5m"},
		{"2h", 2 * time.Hour, "2h"},
		{"1h0m30s", time.Hour + 30*time.Second, "1h0m30s"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			in := `{"name":"bulk","window":"` + tt.in + `","open_duration":"` + tt.in +
				`","max_open_duration":"` + tt.in + `","auth_disable_min_duration":"` + tt.in + `"}`
			c, err := trafficclass.Decode([]byte(in))
			require.NoError(t, err)
			require.Equal(t, tt.want, c.Breaker.Window)
			require.Equal(t, tt.want, c.Breaker.OpenDuration)
			require.Equal(t, tt.want, c.Breaker.MaxOpenDuration)
			require.Equal(t, tt.want, c.AuthDisableMinDuration)

			out, err := json.Marshal(c)
			require.NoError(t, err)
			require.Contains(t, string(out), `"window":"`+tt.out+`"`)
			again, err := trafficclass.Decode(out)
			require.NoError(t, err)
			require.Equal(t, c, again)
		})
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{250 * time.Microsecond, "250µs"},
		{500 * time.Millisecond, "500ms"},
		{2 * time.Second, "2s"},
		{5 * time.Minute, "5m"},
		{10 * time.Minute, "10m"},
		{time.Hour, "1h"},
		{time.Hour + time.Minute, "1h1m"},
		{time.Hour + time.Second, "1h0m1s"},
		{48 * time.Hour, "48h"},
		{-5 * time.Minute, "-5m"},
	}
	for _, tt := range tests {
		got := trafficclass.FormatDuration(tt.in)
		require.Equal(t, tt.want, got)
		back, err := time.ParseDuration(got)
		require.NoError(t, err)
		require.Equal(t, tt.in, back)
	}
}

// TestDecodeFieldErrors checks that each problem with a member is reported
// under that member's name.
func TestDecodeFieldErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		field   string
		message string
	}{
		{"unknown field", `{"name":"bulk","widnow":"30s"}`, "widnow", "unknown field"},
		{"field names are case-sensitive", `{"name":"bulk","Window":"30s"}`, "Window", "unknown field"},
		{"nested breaker object", `{"name":"bulk","breaker":{}}`, "breaker", "unknown field"},
		{"missing name", `{}`, "name", "is required"},
		{"reserved name", `{"name":"auto"}`, "name", `"auto" is reserved`},
		{"number as name", `{"name":7}`, "name", "must be a string"},
		{"string threshold", `{"name":"bulk","failure_rate_threshold":"0.5"}`, "failure_rate_threshold", "must be a number"},
		{"threshold out of range", `{"name":"bulk","failure_rate_threshold":1.5}`, "failure_rate_threshold", "must be in (0, 1]"},
		{"number as window", `{"name":"bulk","window":30}`, "window", `must be a duration string such as "30s"`},
		{"bad duration", `{"name":"bulk","window":"30 seconds"}`, "window", `must be a duration string such as "30s", not "30 seconds"`},
		{"duration without unit", `{"name":"bulk","open_duration":"30"}`, "open_duration", `must be a duration string such as "30s", not "30"`},
		{"zero window", `{"name":"bulk","window":"0s"}`, "window", "must be positive"},
		{"fractional integer", `{"name":"bulk","min_throughput":2.5}`, "min_throughput", "must be an integer"},
		{"string integer", `{"name":"bulk","half_open_trials":"3"}`, "half_open_trials", "must be an integer"},
		{"overflowing integer", `{"name":"bulk","min_throughput":1e30}`, "min_throughput", "must be an integer"},
		{"min throughput below one", `{"name":"bulk","min_throughput":0}`, "min_throughput", "must be at least 1"},
		{"trials below one", `{"name":"bulk","half_open_trials":0}`, "half_open_trials", "must be at least 1"},
		{"string enforce", `{"name":"bulk","enforce":"false"}`, "enforce", "must be true or false"},
		{"string tenant_selectable", `{"name":"bulk","tenant_selectable":"yes"}`, "tenant_selectable", "must be true or false"},
		{"null", `{"name":"bulk","open_jitter":null}`, "open_jitter", "must not be null"},
		{"array trip", `{"name":"bulk","trip":["rate"]}`, "trip", "must be a string"},
		{"unknown trip", `{"name":"bulk","trip":"count"}`, "trip", `must be "rate" or "consecutive"`},
		{"bad auth duration", `{"name":"bulk","auth_disable_min_duration":"5 min"}`, "auth_disable_min_duration", `must be a duration string such as "30s", not "5 min"`},
		{"negative auth duration", `{"name":"bulk","auth_disable_min_duration":"-1s"}`, "auth_disable_min_duration", "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := trafficclass.Decode([]byte(tt.in))
			var fields breaker.FieldErrors
			require.ErrorAs(t, err, &fields)
			require.Equal(t, breaker.FieldErrors{{Field: tt.field, Message: tt.message}}, fields)
			require.True(t, strings.HasPrefix(err.Error(), "decode traffic class: "+tt.field+": "), err.Error())
		})
	}
}

// TestDecodeReportsEveryBadFieldAtOnce checks that type errors, range errors
// and unknown members come back together, in field order with unknown
// members last, and that a member with a type error is not also reported by
// Validate.
func TestDecodeReportsEveryBadFieldAtOnce(t *testing.T) {
	t.Parallel()
	in := `{"zeta":1,"half_open_trials":0,"window":"soon","name":"Bad Name","failure_rate_threshold":2,` +
		`"min_throughput":0,"alpha":true,"enforce":1}`
	_, err := trafficclass.Decode([]byte(in))
	var fields breaker.FieldErrors
	require.ErrorAs(t, err, &fields)
	require.Equal(t, breaker.FieldErrors{
		{Field: "name", Message: "must match ^[a-z0-9][a-z0-9_-]{0,63}$"},
		{Field: "failure_rate_threshold", Message: "must be in (0, 1]"},
		{Field: "window", Message: `must be a duration string such as "30s", not "soon"`},
		{Field: "min_throughput", Message: "must be at least 1"},
		{Field: "half_open_trials", Message: "must be at least 1"},
		{Field: "enforce", Message: "must be true or false"},
		{Field: "alpha", Message: "unknown field"},
		{Field: "zeta", Message: "unknown field"},
	}, fields)
}

func TestDecodeRejectsAnythingButOneObject(t *testing.T) {
	t.Parallel()
	tests := []string{
		``,
		`   `,
		`null`,
		`[]`,
		`"high"`,
		`42`,
		`{"name":"bulk"`,
		`{"name":"bulk"} {"name":"other"}`,
		`{"name":"bulk"}x`,
		`{name:"bulk"}`,
	}
	for _, in := range tests {
		_, err := trafficclass.Decode([]byte(in))
		require.Error(t, err, "%q", in)
		require.True(t, strings.HasPrefix(err.Error(), "decode traffic class: "), err.Error())
		var fields breaker.FieldErrors
		require.NotErrorAs(t, err, &fields, "%q", in)
	}
}

func TestUnmarshalJSONInsideARequest(t *testing.T) {
	t.Parallel()
	var req struct {
		Class trafficclass.Class `json:"class"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"class":{"name":"bulk","window":"1m"}}`), &req))
	require.Equal(t, time.Minute, req.Class.Breaker.Window)
	require.Equal(t, 20, req.Class.Breaker.MinThroughput)

	err := json.Unmarshal([]byte(`{"class":{"name":"bulk","window":"1 minute"}}`), &req)
	var fields breaker.FieldErrors
	require.ErrorAs(t, err, &fields)
	require.Equal(t, "window", fields[0].Field)
}
