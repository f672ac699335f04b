package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// classConfig returns the breaker config of a built-in class.
func classConfig(t *testing.T, name string) breaker.Config {
	t.Helper()
	c, ok := trafficclass.Builtin(name)
	require.True(t, ok, name)
	return c.Breaker
}

// tripBreaker opens an endpoint's closed breaker at `at` as a dispatcher
// does: 36 failures in 40 outcomes under cfg, committed by actor.
func (b *testBundle) tripBreaker(t *testing.T, endpointID string, cfg breaker.Config, at time.Time, actor string, shadow bool) breaker.Transition {
	t.Helper()
	ctx := context.Background()
	stored, err := b.store.LoadBreakers(ctx, []string{endpointID})
	require.NoError(t, err)
	brk, ok := stored[endpointID]
	require.True(t, ok)
	prev := brk.Generation
	brk.Window = breaker.NewWindow(cfg)
	brk.Window.Add(at, 4, 36)
	res := brk.Evaluate(cfg, at, nil)
	require.NotNil(t, res.Transition, "the breaker trips")
	won, err := b.store.CommitTransition(ctx, endpointID, prev, brk, *res.Transition, store.TransitionMeta{Actor: actor, Shadow: shadow})
	require.NoError(t, err)
	require.True(t, won)
	return *res.Transition
}

func (b *testBundle) breaker(t *testing.T, endpointID string) breakerJSON {
	t.Helper()
	r := b.do(t, "GET", "/v1/endpoints/"+endpointID+"/breaker", nil)
	requireStatus(t, http.StatusOK, r)
	return decodeJSON[breakerJSON](t, r)
}

func TestGetBreaker(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	trickle := classConfig(t, trafficclass.Trickle)

	t.Run("a new endpoint's breaker", func(t *testing.T) {
		t.Parallel()
		e := b.createEndpoint(t, "acme")
		got := b.breaker(t, e.ID)
		require.WithinDuration(t, time.Now(), got.Now, 5*time.Second)
		require.Equal(t, breakerJSON{
			EndpointID: e.ID, State: "closed", Generation: 1, TrafficClass: "trickle", FailureRateThreshold: 0.5,
			MinThroughput: 20, Window: "1m", HalfOpenTrials: 3, Enforce: true, UpdatedAt: got.UpdatedAt, Now: got.Now,
			TenantID: "acme", URL: e.URL, Type: "http", Destination: json.RawMessage("null"), EndpointStatus: "enabled",
		}, got, "closed, empty, under the default class, and no transitions member at all")
	})

	t.Run("the current window against the class's thresholds", func(t *testing.T) {
		t.Parallel()
		e := b.createEndpoint(t, "acme")
		_, err := b.store.FlushOutcomes(ctx,
			[]store.OutcomeCount{{EndpointID: e.ID, Generation: 1, BucketStart: breaker.BucketStart(trickle, time.Now()), Window: trickle.Window, Successes: 15, Failures: 5}},
			[]store.RunCount{{EndpointID: e.ID, Generation: 1, Run: breaker.Run{Failures: 3, Prefix: 3, Max: 3, Suffix: 3}}}, nil)
		require.NoError(t, err)
		got := b.breaker(t, e.ID)
		require.Equal(t, "closed", got.State)
		require.Equal(t, 20, got.Observations)
		require.Equal(t, 5, got.Failures)
		require.InDelta(t, 0.25, got.FailureRate, 1e-12)
		require.Equal(t, 0.5, got.FailureRateThreshold)
		require.Equal(t, 20, got.MinThroughput)
		require.Equal(t, 3, got.ConsecutiveFailures)
		require.Nil(t, got.Transitions)
	})

	t.Run("after a trip: open, with the transition and its window figures", func(t *testing.T) {
		t.Parallel()
		e := b.createEndpoint(t, "acme")
		at := time.Now().Truncate(time.Millisecond)
		trip := b.tripBreaker(t, e.ID, trickle, at, "dispatcher-7f9c/2231", false)
		got := b.breaker(t, e.ID)
		require.Equal(t, "open", got.State)
		require.Equal(t, int64(2), got.Generation)
		require.NotNil(t, got.OpenedAt)
		require.True(t, at.Equal(*got.OpenedAt))
		require.NotNil(t, got.OpenUntil)
		require.True(t, at.Add(30*time.Second).Equal(*got.OpenUntil), "open_duration 30s, no jitter drawn")
		require.True(t, got.Now.Before(*got.OpenUntil))
		require.Equal(t, int64(1), got.Trips)
		require.Equal(t, 1, got.TripsLast24h)
		require.Zero(t, got.Observations, "a new generation starts an empty window")
		require.Len(t, got.Transitions, 1)
		tr := got.Transitions[0]
		require.Positive(t, tr.ID)
		require.True(t, at.Equal(tr.At))
		require.NotNil(t, tr.OpenUntil)
		require.True(t, trip.OpenUntil.Equal(*tr.OpenUntil))
		tr.ID, tr.At, tr.OpenUntil = 0, time.Time{}, nil
		require.Equal(t, transitionJSON{From: "closed", To: "open", Reason: "failure_rate", FailureRate: 0.9,
			Observations: 40, Failures: 36, Actor: "dispatcher-7f9c/2231"}, tr)
	})

	t.Run("past open_until it is half-open, and a probe in flight shows", func(t *testing.T) {
		t.Parallel()
		e := b.createEndpoint(t, "acme")
		b.tripBreaker(t, e.ID, trickle, time.Now().Add(-5*time.Minute), "dispatcher-1", false)
		got := b.breaker(t, e.ID)
		require.Equal(t, "half_open", got.State, "derived from the clock")
		require.True(t, got.OpenUntil.Before(got.Now))
		require.False(t, got.TrialInFlight)

		trial, dec, _, err := b.store.TrialLeases().Acquire(ctx, e.ID, trickle, time.Minute, store.TransitionMeta{Actor: "dispatcher-2"})
		require.NoError(t, err)
		require.Equal(t, breaker.Trial, dec.Admission)
		finished := false
		finish := func(o breaker.Outcome) {
			finished = true
			_, _, err := trial.Finish(ctx, trickle, o, nil, store.TransitionMeta{Actor: "dispatcher-2"})
			require.NoError(t, err)
		}
		t.Cleanup(func() {
			// Give the slot back, whatever failed.
			if !finished {
				finish(breaker.OutcomeIgnore)
			}
		})
		got = b.breaker(t, e.ID)
		require.Equal(t, "half_open", got.State)
		require.True(t, got.TrialInFlight)
		require.Equal(t, int64(3), got.Generation)
		require.Len(t, got.Transitions, 2)
		require.Equal(t, []string{"open_elapsed", "failure_rate"}, []string{got.Transitions[0].Reason, got.Transitions[1].Reason})
		require.Equal(t, []string{"open", "half_open"}, []string{got.Transitions[0].From, got.Transitions[0].To})
		require.Equal(t, "dispatcher-2", got.Transitions[0].Actor)
		require.Equal(t, got.Transitions[1].OpenUntil, got.Transitions[0].OpenUntil, "the open period that elapsed")
		require.Equal(t, got.OpenUntil, got.Transitions[0].OpenUntil)

		finish(breaker.OutcomeSuccess)
		got = b.breaker(t, e.ID)
		require.False(t, got.TrialInFlight)
		require.Equal(t, 1, got.TrialSuccesses)
		require.Equal(t, 3, got.HalfOpenTrials)
	})

	t.Run("an explicit class's thresholds", func(t *testing.T) {
		t.Parallel()
		e := b.createEndpointIn(t, "globex", "high")
		got := b.breaker(t, e.ID)
		require.Equal(t, "high", got.TrafficClass)
		require.Equal(t, 50, got.MinThroughput)
		require.Equal(t, "5s", got.Window)
		require.Equal(t, "globex", got.TenantID)
	})

	t.Run("shadow mode: enforce false, and shadow trips are not counted in 24 hours", func(t *testing.T) {
		t.Parallel()
		b.createClass(t, map[string]any{"name": "shadowy", "enforce": false, "min_throughput": 10, "failure_rate_threshold": 0.8})
		e := b.createEndpointIn(t, "acme", "shadowy")
		cfg := breaker.DefaultConfig()
		cfg.MinThroughput, cfg.FailureRateThreshold = 10, 0.8
		b.tripBreaker(t, e.ID, cfg, time.Now(), "dispatcher-1", true)
		got := b.breaker(t, e.ID)
		require.False(t, got.Enforce)
		require.Equal(t, 0.8, got.FailureRateThreshold)
		require.Equal(t, int64(1), got.Trips)
		require.Zero(t, got.TripsLast24h)
		require.Len(t, got.Transitions, 1)
		require.True(t, got.Transitions[0].Shadow)
	})

	t.Run("a disabled endpoint", func(t *testing.T) {
		t.Parallel()
		e := b.createEndpoint(t, "acme")
		requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+e.ID+"/disable", nil))
		got := b.breaker(t, e.ID)
		require.Equal(t, "disabled", got.EndpointStatus)
		require.Equal(t, ptr("manual"), got.DisabledReason)
	})

	t.Run("no live endpoint", func(t *testing.T) {
		t.Parallel()
		gone := b.createEndpoint(t, "acme")
		requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/endpoints/"+gone.ID, nil))
		for _, id := range []string{gone.ID, missingID("ep"), "ep_nope"} {
			requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/endpoints/"+id+"/breaker", nil))
		}
	})
}

func TestListBreakers(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	// Open for an hour: the open breaker stays open however slowly a busy
	// machine runs the test, and the one tripped two hours ago is past it.
	hour := classConfig(t, trafficclass.Trickle)
	hour.OpenDuration, hour.MaxOpenDuration = time.Hour, time.Hour
	closed := b.createEndpoint(t, "acme")
	open := b.createEndpoint(t, "acme")
	past := b.createEndpoint(t, "acme")
	isolated := b.createEndpoint(t, "acme")
	other := b.createEndpoint(t, "globex")
	gone := b.createEndpoint(t, "acme")
	b.tripBreaker(t, open.ID, hour, time.Now(), "dispatcher-1", false)
	b.tripBreaker(t, past.ID, hour, time.Now().Add(-2*time.Hour), "dispatcher-1", false)
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+isolated.ID+"/breaker/isolate", nil))
	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/endpoints/"+gone.ID, nil))

	list := func(t *testing.T, query string) []breakerJSON {
		t.Helper()
		r := b.do(t, "GET", "/v1/breakers"+query, nil)
		requireStatus(t, http.StatusOK, r)
		got := decodeJSON[listJSON[breakerJSON]](t, r)
		require.Nil(t, got.NextCursor)
		for _, br := range got.Data {
			require.Nil(t, br.Transitions, "a list leaves transitions out")
		}
		return got.Data
	}
	idsOf := func(bs []breakerJSON) []string {
		out := make([]string, len(bs))
		for i, br := range bs {
			out[i] = br.EndpointID
		}
		return out
	}
	sorted := func(ids ...string) []string { return slices.Sorted(slices.Values(ids)) }

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", sorted(closed.ID, open.ID, past.ID, isolated.ID, other.ID)},
		{"?state=closed", sorted(closed.ID, other.ID)},
		{"?state=open", []string{open.ID}},
		{"?state=half_open", []string{past.ID}},
		{"?state=isolated", []string{isolated.ID}},
		{"?tenant_id=globex", []string{other.ID}},
		{"?state=closed&tenant_id=acme", []string{closed.ID}},
		{"?state=open&tenant_id=globex", []string{}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			got := list(t, tc.query)
			require.Equal(t, tc.want, idsOf(got))
			for _, br := range got {
				// Each is what its own breaker shows, transitions aside.
				one := b.breaker(t, br.EndpointID)
				one.Transitions, one.Now, br.Now = nil, time.Time{}, time.Time{}
				require.Equal(t, one, br)
			}
		})
	}

	byID := map[string]breakerJSON{}
	for _, br := range list(t, "") {
		byID[br.EndpointID] = br
	}
	require.Equal(t, "open", byID[open.ID].State)
	require.True(t, byID[open.ID].Now.Before(*byID[open.ID].OpenUntil))
	require.Equal(t, "half_open", byID[past.ID].State, "open past open_until is half-open")
	require.True(t, byID[past.ID].OpenUntil.Before(byID[past.ID].Now))
	require.Equal(t, "isolated", byID[isolated.ID].State)
	require.Nil(t, byID[isolated.ID].OpenUntil)
	// A breaker that is not closed shows the window that tripped it (its
	// own window starts empty on the open: 0% of 0); a closed one none.
	for _, id := range []string{open.ID, past.ID} {
		tr := byID[id].Tripped
		require.NotNil(t, tr, "a tripped breaker shows its trip")
		require.Equal(t, breaker.ReasonFailureRate, tr.Reason)
		require.InDelta(t, 0.9, tr.FailureRate, 1e-9)
		require.Equal(t, 40, tr.Observations)
		require.Equal(t, 36, tr.Failures)
		require.Zero(t, byID[id].Observations, "the live window emptied on the open")
	}
	require.Equal(t, "isolate", byID[isolated.ID].Tripped.Reason)
	require.Nil(t, byID[closed.ID].Tripped)

	t.Run("pages", func(t *testing.T) {
		var seen []string
		after := ""
		for page := 0; ; page++ {
			require.Less(t, page, 5)
			r := b.do(t, "GET", "/v1/breakers?limit=2"+after, nil)
			requireStatus(t, http.StatusOK, r)
			got := decodeJSON[listJSON[breakerJSON]](t, r)
			require.LessOrEqual(t, len(got.Data), 2)
			seen = append(seen, idsOf(got.Data)...)
			if got.NextCursor == nil {
				break
			}
			require.Equal(t, got.Data[len(got.Data)-1].EndpointID, *got.NextCursor)
			after = "&after=" + *got.NextCursor
		}
		require.Equal(t, sorted(closed.ID, open.ID, past.ID, isolated.ID, other.ID), seen)
	})
}

func TestListBreakersRejectsBadFilters(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	for _, tc := range []struct {
		query  string
		fields []string
	}{
		{"state=ajar", []string{"state"}},
		{"state=OPEN", []string{"state"}},
		{"state=half-open", []string{"state"}},
		{"state=", nil}, // empty is no filter (the document, stricter, wants a state)
		{"limit=0", []string{"limit"}},
		{"limit=251", []string{"limit"}},
		{"limit=ten", []string{"limit"}},
		{"tenant_id=-acme", []string{"tenant_id"}},
		{"state=shut&limit=0&tenant_id=a%20b", []string{"state", "limit", "tenant_id"}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var opts []callOpt
			if tc.fields == nil {
				opts = append(opts, lenient())
			}
			r := b.do(t, "GET", "/v1/breakers?"+tc.query, nil, opts...)
			if tc.fields == nil {
				requireStatus(t, http.StatusOK, r)
				return
			}
			p := requireProblem(t, http.StatusBadRequest, r)
			var fields []string
			for _, f := range p.Errors {
				fields = append(fields, f.Field)
			}
			require.ElementsMatch(t, tc.fields, fields)
		})
	}
}

func TestResetAndIsolateBreaker(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	e := b.createEndpoint(t, "acme")
	path := "/v1/endpoints/" + e.ID + "/breaker"
	b.tripBreaker(t, e.ID, classConfig(t, trafficclass.Trickle), time.Now(), "dispatcher-1", false)
	tripped := b.breaker(t, e.ID)

	// Isolate, with a reason.
	r := b.do(t, "POST", path+"/isolate", map[string]any{"reason": "customer migrating their receiver"})
	requireStatus(t, http.StatusOK, r)
	iso := decodeJSON[breakerJSON](t, r)
	require.Equal(t, "isolated", iso.State)
	require.Equal(t, tripped.Generation+1, iso.Generation)
	require.Nil(t, iso.OpenUntil)
	require.NotNil(t, iso.OpenedAt)
	require.WithinDuration(t, iso.Now, *iso.OpenedAt, 5*time.Second)
	require.Equal(t, int64(1), iso.Trips, "an isolation is not a trip")
	require.Len(t, iso.Transitions, 2)
	tr := iso.Transitions[0]
	require.Equal(t, transitionJSON{ID: tr.ID, At: tr.At, From: "open", To: "isolated", Reason: "isolate",
		Actor: "bootstrap", Note: "customer migrating their receiver"}, tr)
	require.Equal(t, tripped.Transitions[0], iso.Transitions[1])
	got := b.breaker(t, e.ID)
	got.Now, iso.Now = time.Time{}, time.Time{}
	require.Equal(t, iso, got, "stored")

	// Reset, without a body.
	r = b.do(t, "POST", path+"/reset", nil)
	requireStatus(t, http.StatusOK, r)
	reset := decodeJSON[breakerJSON](t, r)
	require.Equal(t, "closed", reset.State)
	require.Equal(t, iso.Generation+1, reset.Generation)
	require.Nil(t, reset.OpenedAt)
	require.Nil(t, reset.OpenUntil)
	require.Zero(t, reset.Observations)
	tr = reset.Transitions[0]
	require.Equal(t, transitionJSON{ID: tr.ID, At: tr.At, From: "isolated", To: "closed", Reason: "reset", Actor: "bootstrap"}, tr)

	// The history holds who and why.
	recs, err := b.store.ListTransitions(ctx, e.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, recs, 3)
	require.Equal(t, []string{"bootstrap", "bootstrap", "dispatcher-1"}, []string{recs[0].Actor, recs[1].Actor, recs[2].Actor})
	require.Equal(t, []string{"", "customer migrating their receiver", ""}, []string{recs[0].Note, recs[1].Note, recs[2].Note})

	// Either works from any state, with an empty object, a Content-Type and
	// no body, or a reason at its limit in characters.
	limit := strings.Repeat("é", 500)
	for _, step := range []struct {
		action, state string
		body          any
		opts          []callOpt
		note          string
	}{
		{"reset", "closed", map[string]any{}, nil, ""},
		{"reset", "closed", nil, []callOpt{withContentType("application/json")}, ""},
		{"isolate", "isolated", map[string]any{"reason": limit}, nil, limit},
		{"isolate", "isolated", nil, nil, ""},
		// Any +json type is JSON; the document lists application/json only.
		{"reset", "closed", map[string]any{"reason": "receiver fixed (INC-4411)"},
			[]callOpt{withContentType("application/merge-patch+json"), lenient()}, "receiver fixed (INC-4411)"},
	} {
		r := b.do(t, "POST", path+"/"+step.action, step.body, step.opts...)
		requireStatus(t, http.StatusOK, r)
		got := decodeJSON[breakerJSON](t, r)
		require.Equal(t, step.state, got.State)
		require.Equal(t, step.note, got.Transitions[0].Note)
		require.Equal(t, "bootstrap", got.Transitions[0].Actor)
	}
	recs, err = b.store.ListTransitions(ctx, e.ID, nil, 20)
	require.NoError(t, err)
	require.Len(t, recs, 8, "every operation is recorded, even one that changes no state")
}

func TestOperateBreakerRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	// Open far longer than any run of the test: the breaker reads half-open
	// once its open_until passes, which a busy machine can reach.
	cfg := classConfig(t, trafficclass.Trickle)
	cfg.OpenDuration, cfg.MaxOpenDuration = time.Hour, time.Hour
	b.tripBreaker(t, e.ID, cfg, time.Now(), "dispatcher-1", false)
	before := b.breaker(t, e.ID)
	valid := map[string]any{"reason": "why"}
	cases := []badCase{
		bad("reason too long", 400, set(valid, "reason", strings.Repeat("r", 501)), "reason"),
		bad("reason too long in characters", 400, set(valid, "reason", strings.Repeat("é", 501)), "reason"),
		bad("reason is a number", 400, set(valid, "reason", 7), "reason"),
		bad("unknown field", 400, set(valid, "actor", "mallory"), "actor"),
		bad("reason in another case", 400, set(valid, "Reason", "x"), "Reason"),
		bad("body over 64 KiB", 413, set(valid, "reason", strings.Repeat("r", 64<<10)), "body").with(docBlind(sizeLimit)),
	}
	for _, c := range commonBodyCases(set(valid)) {
		// No body at all is a reset or isolation without a reason.
		if c.name != "empty body" {
			cases = append(cases, c)
		}
	}
	for _, action := range []string{"reset", "isolate"} {
		t.Run(action, func(t *testing.T) {
			path := "/v1/endpoints/" + e.ID + "/breaker/" + action
			b.requireRejected(t, "POST", path, cases, func(t *testing.T) {
				got := b.breaker(t, e.ID)
				got.Now = before.Now
				require.Equal(t, before, got, "the breaker is untouched")
			})
		})
	}
	for _, id := range []string{missingID("ep")} {
		for _, action := range []string{"reset", "isolate"} {
			requireProblem(t, http.StatusNotFound, b.do(t, "POST", "/v1/endpoints/"+id+"/breaker/"+action, valid))
			requireProblem(t, http.StatusNotFound, b.do(t, "POST", "/v1/endpoints/"+id+"/breaker/"+action, nil))
		}
	}
}
