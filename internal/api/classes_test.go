package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

const (
	durationFloor = "the 100ms floor of a window is not in the schema"
	crossMember   = "a bound set by another member is not in the schema"
	pathName      = "that the body's name matches the path is not in the schema"
	classExists   = "whether a class exists is not in the schema"
)

// builtinJSON returns the shipped built-in class name as the API shows it.
func builtinJSON(t *testing.T, name string) classJSON {
	t.Helper()
	c, ok := trafficclass.Builtin(name)
	require.True(t, ok, name)
	raw, err := c.MarshalJSON()
	require.NoError(t, err)
	var out classJSON
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

// defaultClass is a custom class with every member at its default.
func defaultClass(name string) classJSON {
	return classJSON{
		Name: name, Trip: "rate", FailureRateThreshold: 0.5, Window: "30s", MinThroughput: 20,
		ConsecutiveFailures: 5, OpenDuration: "30s", OpenJitter: 0.3, OpenBackoff: 1, MaxOpenDuration: "10m",
		HalfOpenTrials: 3, HalfOpenConcurrency: 1, Enforce: true, AuthDisableAfter: 10, AuthDisableMinDuration: "5m",
		AutoTune: "recommend", TuneMinThroughputFloor: 1, TuneMinThroughputCeil: 10000, TuneFailureRateCeil: 1,
	}
}

func (b *testBundle) getClass(t *testing.T, name string) classJSON {
	t.Helper()
	r := b.do(t, "GET", "/v1/traffic-classes/"+name, nil)
	requireStatus(t, http.StatusOK, r)
	return decodeJSON[classJSON](t, r)
}

func TestListTrafficClasses(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "GET", "/v1/traffic-classes", nil)
	requireStatus(t, http.StatusOK, r)
	got := decodeJSON[listJSON[classJSON]](t, r)
	require.Nil(t, got.NextCursor)
	want := []classJSON{builtinJSON(t, "high"), builtinJSON(t, "low"), builtinJSON(t, "medium"), builtinJSON(t, "trickle")}
	require.Equal(t, want, got.Data, "the built-ins, seeded by migration, by name")

	b.createClass(t, map[string]any{"name": "bulk"})
	b.createClass(t, map[string]any{"name": "a-first"})
	got = decodeJSON[listJSON[classJSON]](t, b.do(t, "GET", "/v1/traffic-classes", nil))
	var names []string
	for _, c := range got.Data {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"a-first", "bulk", "high", "low", "medium", "trickle"}, names)
}

func TestCreateTrafficClass(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, tc := range []struct {
		name string
		req  map[string]any
		want func() classJSON
	}{
		{"defaults", map[string]any{"name": "plain"}, func() classJSON { return defaultClass("plain") }},
		{"every member", map[string]any{
			"name": "every_1", "trip": "consecutive", "failure_rate_threshold": 1, "window": "1h30m", "min_throughput": 1,
			"consecutive_failures": 3, "open_duration": "500ms", "open_jitter": 0, "open_backoff": 2.5, "max_open_duration": "90s",
			"half_open_trials": 1, "half_open_concurrency": 4, "enforce": false, "auth_disable_after": 1,
			"auth_disable_min_duration": "0s", "auto_tune": "apply", "tune_min_throughput_floor": 10, "tune_failure_rate_floor": 0.3,
			"tune_min_throughput_ceiling": 500, "tune_failure_rate_ceiling": 0.8,
		}, func() classJSON {
			return classJSON{
				Name: "every_1", Trip: "consecutive", FailureRateThreshold: 1, Window: "1h30m", MinThroughput: 1,
				ConsecutiveFailures: 3, OpenDuration: "500ms", OpenJitter: 0, OpenBackoff: 2.5, MaxOpenDuration: "1m30s",
				HalfOpenTrials: 1, HalfOpenConcurrency: 4, Enforce: false, AuthDisableAfter: 1, AuthDisableMinDuration: "0s",
				AutoTune: "apply", TuneMinThroughputFloor: 10, TuneFailureRateFloor: 0.3,
				TuneMinThroughputCeil: 500, TuneFailureRateCeil: 0.8,
			}
		}},
		{"durations are written back without trailing zero units", map[string]any{
			"name": "units", "window": "120s", "open_duration": "1m0s", "max_open_duration": "2h0m0s", "auth_disable_min_duration": "0",
		}, func() classJSON {
			c := defaultClass("units")
			c.Window, c.OpenDuration, c.MaxOpenDuration, c.AuthDisableMinDuration = "2m", "1m", "2h", "0s"
			return c
		}},
		{"the smallest window", map[string]any{"name": "fast", "window": "100ms"}, func() classJSON {
			c := defaultClass("fast")
			c.Window = "100ms"
			return c
		}},
		{"builtin is output only and ignored", map[string]any{"name": "pretender", "builtin": true}, func() classJSON {
			return defaultClass("pretender")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := b.do(t, "POST", "/v1/traffic-classes", tc.req)
			requireStatus(t, http.StatusCreated, r)
			require.Equal(t, "/v1/traffic-classes/"+tc.req["name"].(string), r.Header.Get("Location"))
			got := decodeJSON[classJSON](t, r)
			require.Equal(t, tc.want(), got)
			require.Equal(t, got, b.getClass(t, got.Name), "stored")
		})
	}
}

func TestCreateTrafficClassConflict(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createClass(t, map[string]any{"name": "taken", "min_throughput": 7})
	for _, name := range []string{"taken", "medium"} {
		before := b.counts(t)
		p := requireProblem(t, http.StatusConflict, b.do(t, "POST", "/v1/traffic-classes", map[string]any{"name": name}))
		require.Equal(t, api.ProblemTypeBase+"conflict", p.Type)
		require.Contains(t, p.Detail, "a traffic class with that name exists")
		require.Equal(t, before, b.counts(t), "nothing written")
	}
	require.Equal(t, 7, b.getClass(t, "taken").MinThroughput)
	require.Equal(t, builtinJSON(t, "medium"), b.getClass(t, "medium"))
}

func TestGetTrafficClassNotFound(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, name := range []string{"nope", "auto", "Medium", "a%20b"} {
		p := requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/traffic-classes/"+name, nil))
		require.Equal(t, api.ProblemTypeBase+"not-found", p.Type)
	}
}

func TestPutTrafficClass(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	t.Run("replaces the whole class: omitted members take their defaults", func(t *testing.T) {
		t.Parallel()
		b.createClass(t, map[string]any{"name": "bulk", "min_throughput": 100, "enforce": false, "open_jitter": 0})
		r := b.do(t, "PUT", "/v1/traffic-classes/bulk", map[string]any{"window": "1m"})
		requireStatus(t, http.StatusOK, r)
		want := defaultClass("bulk")
		want.Window = "1m"
		require.Equal(t, want, decodeJSON[classJSON](t, r))
		require.Equal(t, want, b.getClass(t, "bulk"))
	})

	t.Run("a body may repeat the name", func(t *testing.T) {
		t.Parallel()
		b.createClass(t, map[string]any{"name": "named"})
		r := b.do(t, "PUT", "/v1/traffic-classes/named", map[string]any{"name": "named", "half_open_trials": 5})
		requireStatus(t, http.StatusOK, r)
		require.Equal(t, 5, decodeJSON[classJSON](t, r).HalfOpenTrials)
	})

	t.Run("a new name creates a custom class", func(t *testing.T) {
		t.Parallel()
		requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/traffic-classes/batch", nil))
		r := b.do(t, "PUT", "/v1/traffic-classes/batch", map[string]any{"enforce": false, "builtin": true})
		requireStatus(t, http.StatusCreated, r)
		want := defaultClass("batch")
		want.Enforce = false
		require.Equal(t, want, decodeJSON[classJSON](t, r))
		require.Equal(t, want, b.getClass(t, "batch"))
		// A second PUT replaces it.
		requireStatus(t, http.StatusOK, b.do(t, "PUT", "/v1/traffic-classes/batch", map[string]any{"enforce": true}))
		require.Equal(t, defaultClass("batch"), b.getClass(t, "batch"))
	})

	t.Run("built-ins can be tuned and stay built-in", func(t *testing.T) {
		t.Parallel()
		r := b.do(t, "PUT", "/v1/traffic-classes/high", map[string]any{
			"failure_rate_threshold": 0.7, "window": "10s", "min_throughput": 80, "open_duration": "15s",
			"open_backoff": 2, "max_open_duration": "2m", "builtin": false,
		})
		requireStatus(t, http.StatusOK, r)
		want := builtinJSON(t, "high")
		want.FailureRateThreshold, want.Window, want.MinThroughput = 0.7, "10s", 80
		require.Equal(t, want, decodeJSON[classJSON](t, r))
		require.Equal(t, want, b.getClass(t, "high"))
		// Still not deletable.
		requireProblem(t, http.StatusConflict, b.do(t, "DELETE", "/v1/traffic-classes/high", nil))
	})
}

func TestDeleteTrafficClass(t *testing.T) {
	t.Parallel()

	t.Run("an unused custom class", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.createClass(t, map[string]any{"name": "spare"})
		r := b.do(t, "DELETE", "/v1/traffic-classes/spare", nil)
		requireStatus(t, http.StatusNoContent, r)
		require.Empty(t, r.Body)
		requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/traffic-classes/spare", nil))
		requireProblem(t, http.StatusNotFound, b.do(t, "DELETE", "/v1/traffic-classes/spare", nil))
		// The name can be used again.
		b.createClass(t, map[string]any{"name": "spare"})
	})

	t.Run("built-ins cannot be deleted", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		for _, name := range []string{"high", "medium", "low", "trickle"} {
			before := b.counts(t)
			p := requireProblem(t, http.StatusConflict, b.do(t, "DELETE", "/v1/traffic-classes/"+name, nil))
			require.Equal(t, api.ProblemTypeBase+"conflict", p.Type)
			require.Contains(t, p.Detail, "built-in traffic classes can be tuned but not deleted")
			require.Equal(t, before, b.counts(t))
			require.Equal(t, builtinJSON(t, name), b.getClass(t, name))
		}
	})

	t.Run("a class in use cannot be deleted", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.createClass(t, map[string]any{"name": "busy"})
		first := b.createEndpointIn(t, "acme", "busy")
		second := b.createEndpointIn(t, "globex", "busy")
		deleteBusy := func() *response { return b.do(t, "DELETE", "/v1/traffic-classes/busy", nil) }

		p := requireProblem(t, http.StatusConflict, deleteBusy())
		require.Contains(t, p.Detail, "the traffic class is in use")
		require.Equal(t, "busy", b.getClass(t, "busy").Name)

		// Moved off it, one endpoint still holds it.
		requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/endpoints/"+first.ID, map[string]any{"traffic_class": "auto"}))
		requireProblem(t, http.StatusConflict, deleteBusy())
		// A deleted endpoint does not.
		requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/endpoints/"+second.ID, nil))
		requireStatus(t, http.StatusNoContent, deleteBusy())
	})
}

// classCases are the bad bodies of a traffic class; valid is a good body
// (without a name for PUT) and named reports whether it carries the name.
func classCases(valid map[string]any, named bool) []badCase {
	cases := []badCase{
		// Out of range, one member at a time.
		bad("threshold of 0", 400, set(valid, "failure_rate_threshold", 0), "failure_rate_threshold"),
		bad("threshold over 1", 400, set(valid, "failure_rate_threshold", 1.5), "failure_rate_threshold"),
		bad("negative threshold", 400, set(valid, "failure_rate_threshold", -0.1), "failure_rate_threshold"),
		bad("zero window", 400, set(valid, "window", "0s"), "window"),
		bad("window of a bare 0", 400, set(valid, "window", "0"), "window"),
		bad("negative window", 400, set(valid, "window", "-30s"), "window"),
		bad("window under 100ms", 400, set(valid, "window", "50ms"), "window").with(docBlind(durationFloor)),
		bad("min_throughput of 0", 400, set(valid, "min_throughput", 0), "min_throughput"),
		bad("negative min_throughput", 400, set(valid, "min_throughput", -20), "min_throughput"),
		bad("half_open_trials of 0", 400, set(valid, "half_open_trials", 0), "half_open_trials"),
		bad("half_open_concurrency of 0", 400, set(valid, "half_open_concurrency", 0), "half_open_concurrency"),
		bad("consecutive_failures of 0", 400, set(valid, "consecutive_failures", 0), "consecutive_failures"),
		bad("zero open_duration", 400, set(valid, "open_duration", "0s"), "open_duration"),
		bad("open_jitter over 1", 400, set(valid, "open_jitter", 1.5), "open_jitter"),
		bad("open_backoff under 1", 400, set(valid, "open_backoff", 0.5), "open_backoff"),
		bad("max_open_duration under open_duration", 400, set(valid, "open_duration", "1m", "max_open_duration", "30s"), "max_open_duration").
			with(docBlind(crossMember)),
		bad("auth_disable_after of 0", 400, set(valid, "auth_disable_after", 0), "auth_disable_after"),
		bad("negative auth_disable_min_duration", 400, set(valid, "auth_disable_min_duration", "-1m"), "auth_disable_min_duration"),
		bad("unknown trip", 400, set(valid, "trip", "sometimes"), "trip"),
		// Several at once are all named.
		bad("several members out of range", 400,
			set(valid, "failure_rate_threshold", 2, "window", "0s", "min_throughput", 0, "half_open_trials", 0),
			"failure_rate_threshold", "window", "min_throughput", "half_open_trials"),
		// Durations are Go duration strings.
		bad("a duration in words", 400, set(valid, "window", "30 seconds"), "window"),
		bad("a duration without a unit", 400, set(valid, "open_duration", "30"), "open_duration"),
		bad("a duration in an unknown unit", 400, set(valid, "max_open_duration", "1d"), "max_open_duration"),
		bad("a duration as a number", 400, set(valid, "window", 30), "window"),
		bad("an empty duration", 400, set(valid, "auth_disable_min_duration", ""), "auth_disable_min_duration"),
		bad("several bad durations", 400, set(valid, "window", "soon", "open_duration", "1 m"), "window", "open_duration"),
		// Types and nulls.
		bad("a null member", 400, set(valid, "window", nil), "window"),
		bad("an integer as a string", 400, set(valid, "min_throughput", "20"), "min_throughput"),
		bad("a fractional integer", 400, set(valid, "half_open_trials", 1.5), "half_open_trials"),
		bad("a boolean as a string", 400, set(valid, "enforce", "yes"), "enforce"),
		bad("a number as a string", 400, set(valid, "open_jitter", "0.3"), "open_jitter"),
		// Names are case-sensitive; unknown members are named.
		bad("unknown member", 400, set(valid, "colour", "red"), "colour"),
		bad("a member in another case", 400, set(valid, "Window", "1m"), "Window"),
		bad("an endpoint's member", 400, set(valid, "traffic_class", "auto"), "traffic_class"),
		// Size.
		bad("body over 64 KiB", 413, set(valid, "padding", strings.Repeat("p", 64<<10)), "body").with(docBlind(sizeLimit)),
	}
	if named {
		cases = append(cases,
			bad("no name", 400, set(valid, "name", deleteKey), "name"),
			bad("empty name", 400, set(valid, "name", ""), "name"),
			bad("upper-case name", 400, set(valid, "name", "Bulk"), "name"),
			bad("name with a space", 400, set(valid, "name", "bulk lane"), "name"),
			bad("name starting with a dash", 400, set(valid, "name", "-bulk"), "name"),
			bad("name too long", 400, set(valid, "name", strings.Repeat("n", 65)), "name"),
			bad("the reserved name auto", 400, set(valid, "name", "auto"), "name"),
			bad("name is a number", 400, set(valid, "name", 7), "name"),
		)
	} else {
		cases = append(cases,
			bad("another name in the body", 400, set(valid, "name", "other"), "name").with(docBlind(pathName)),
			bad("a null name in the body", 400, set(valid, "name", nil), "name"),
			// Not taken as the name: names are case-sensitive.
			bad("the name in another case", 400, set(valid, "NAME", "other"), "NAME"),
		)
	}
	return append(cases, commonBodyCases(set(valid))...)
}

func TestCreateTrafficClassRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createClass(t, map[string]any{"name": "existing"})
	cases := classCases(map[string]any{"name": "custom", "enforce": true}, true)
	b.requireRejected(t, "POST", "/v1/traffic-classes", cases, func(t *testing.T) {
		requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/traffic-classes/custom", nil))
	})
}

func TestPutTrafficClassRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	stored := b.createClass(t, map[string]any{"name": "custom", "min_throughput": 42})
	cases := classCases(map[string]any{"enforce": true}, false)
	b.requireRejected(t, "PUT", "/v1/traffic-classes/custom", cases, func(t *testing.T) {
		require.Equal(t, stored, b.getClass(t, "custom"), "the class is unchanged")
	})
	// A built-in is refused the same way and keeps its values.
	b.requireRejected(t, "PUT", "/v1/traffic-classes/medium", []badCase{
		bad("several members out of range", 400, `{"failure_rate_threshold":0,"window":"-1s","min_throughput":0,"half_open_trials":0}`,
			"failure_rate_threshold", "window", "min_throughput", "half_open_trials"),
	}, func(t *testing.T) {
		require.Equal(t, builtinJSON(t, "medium"), b.getClass(t, "medium"))
	})
	// The path's name is checked like a body's.
	for _, name := range []string{"auto", "Custom", strings.Repeat("n", 65)} {
		before := b.counts(t)
		requireFieldError(t, http.StatusBadRequest, b.do(t, "PUT", "/v1/traffic-classes/"+name, map[string]any{}), "name")
		require.Equal(t, before, b.counts(t))
	}
}

func TestEndpointTrafficClassMustExist(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createClass(t, map[string]any{"name": "gone"})
	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/traffic-classes/gone", nil))
	e := b.createEndpoint(t, "acme")
	path := "/v1/endpoints/" + e.ID

	for _, class := range []string{"nope", "gone", "bulk_1"} {
		t.Run(class, func(t *testing.T) {
			before := b.counts(t)
			r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/x", "traffic_class": class},
				docBlind(classExists))
			p := requireFieldError(t, http.StatusBadRequest, r, "traffic_class")
			require.Len(t, p.Errors, 1)
			require.Contains(t, p.Errors[0].Message, "names no traffic class")
			require.Equal(t, before, b.counts(t), "nothing written")

			r = b.do(t, "PATCH", path, map[string]any{"description": "changed", "traffic_class": class}, docBlind(classExists))
			requireFieldError(t, http.StatusBadRequest, r, "traffic_class")
			require.Equal(t, before, b.counts(t), "nothing written")
			require.Equal(t, e, decodeJSON[endpointJSON](t, b.do(t, "GET", path, nil)), "the endpoint is unchanged")
		})
	}

	// Every built-in, a custom class and auto are accepted.
	b.createClass(t, map[string]any{"name": "bulk_1"})
	for _, class := range []string{"high", "medium", "low", "trickle", "bulk_1", "auto"} {
		requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/endpoints",
			map[string]any{"tenant_id": "acme", "url": "https://acme.example/" + class, "traffic_class": class}))
		r := b.do(t, "PATCH", path, map[string]any{"traffic_class": class})
		requireStatus(t, http.StatusOK, r)
		require.Equal(t, class, decodeJSON[endpointJSON](t, r).TrafficClass)
	}
}

// TestTenantsPickOnlySelectableClasses: a class decides how leniently an
// endpoint is treated, so a tenant token or portal session may name only a
// class an admin made tenant_selectable (and auto when creating); any
// other, an unknown one included, answers 403 naming traffic_class and
// writes nothing. Admins name any class; a PUT that leaves the member out
// makes the class unselectable again.
func TestTenantsPickOnlySelectableClasses(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	lenient := b.createClass(t, map[string]any{"name": "lenient", "failure_rate_threshold": 1, "auth_disable_after": 1000})
	require.False(t, lenient.TenantSelectable, "no class is selectable by default")
	partner := b.createClass(t, map[string]any{"name": "partner", "tenant_selectable": true})
	require.True(t, partner.TenantSelectable)
	tok, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeTenant, Name: "acme-app", TenantID: "acme"})
	as := withHeader("Authorization", "Bearer "+tok)
	pc := b.portalClient(t, "acme", map[string]any{})
	own := b.createEndpoint(t, "acme")
	newEndpoint := func(class string) map[string]any {
		return map[string]any{"tenant_id": "acme", "url": "https://acme.example/" + class, "traffic_class": class}
	}

	before := b.counts(t)
	for _, class := range []string{"lenient", "medium", "trickle", "nope"} {
		p := requireFieldError(t, http.StatusForbidden, b.do(t, "POST", "/v1/endpoints", newEndpoint(class), as), "traffic_class")
		require.Equal(t, "this token may only pick a traffic class an admin made tenant_selectable", p.Detail, class)
		a := pc.send(t, "POST", "/v1/endpoints", newEndpoint(class))
		require.Equal(t, http.StatusForbidden, a.status, "%s: %s", class, a.body)
		require.Contains(t, string(a.body), `"field":"traffic_class"`)
		requireFieldError(t, http.StatusForbidden, b.do(t, "PATCH", "/v1/endpoints/"+own.ID, map[string]any{"traffic_class": class}, as), "traffic_class")
	}
	// Changing an endpoint, auto would undo an admin's choice of class.
	requireFieldError(t, http.StatusForbidden, b.do(t, "PATCH", "/v1/endpoints/"+own.ID, map[string]any{"traffic_class": "auto"}, as), "traffic_class")
	require.Equal(t, before, b.counts(t), "nothing written")
	got, err := b.store.GetEndpoint(t.Context(), own.ID)
	require.NoError(t, err)
	require.Equal(t, "auto", got.TrafficClass)

	for _, class := range []string{"partner", "auto"} {
		requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/endpoints", newEndpoint(class), as))
	}
	require.Equal(t, http.StatusCreated, pc.send(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/p", "traffic_class": "partner"}).status)
	r := b.do(t, "PATCH", "/v1/endpoints/"+own.ID, map[string]any{"traffic_class": "partner"}, as)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, "partner", decodeJSON[endpointJSON](t, r).TrafficClass)
	// An admin names any class.
	requireStatus(t, http.StatusCreated, b.do(t, "POST", "/v1/endpoints", newEndpoint("lenient")))
	requireStatus(t, http.StatusOK, b.do(t, "PATCH", "/v1/endpoints/"+own.ID, map[string]any{"traffic_class": "lenient"}))

	// A PUT replaces the whole class: left out, tenant_selectable is false.
	r = b.do(t, "PUT", "/v1/traffic-classes/partner", map[string]any{"failure_rate_threshold": 0.6})
	requireStatus(t, http.StatusOK, r)
	require.False(t, decodeJSON[classJSON](t, r).TenantSelectable)
	requireFieldError(t, http.StatusForbidden, b.do(t, "POST", "/v1/endpoints", newEndpoint("partner"), as), "traffic_class")
}
