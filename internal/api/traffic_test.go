package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/trafficclass"
)

// seedTraffic writes an endpoint's delivery log: the endpoint was created
// `span` before the last 5-minute boundary and was sent one request every
// `every` up to that boundary, each failEvery-th one failing (the rest
// succeeding). Every minute and every 5-minute bucket of the history is
// then whole, so the figures are exact.
func (b *testBundle) seedTraffic(t *testing.T, endpointID string, span, every time.Duration, failEvery int) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `
		WITH base AS (SELECT date_bin('5 minutes', now(), timestamptz '2000-01-01') AS at),
		created AS (UPDATE endpoints SET created_at = (SELECT at FROM base) - $2::interval WHERE id = $1)
		INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, status_code, classification)
		SELECT 'dlv_seed', 'msg_seed', $1, 1, base.at - i * $3::interval, 5,
			CASE WHEN i % $4 = 0 THEN 500 ELSE 200 END,
			CASE WHEN i % $4 = 0 THEN 'failure' ELSE 'success' END
		FROM base, generate_series(1, $5::int) AS i`,
		endpointID, span, every, failEvery, int(span/every))
	require.NoError(t, err)
}

func (b *testBundle) traffic(t *testing.T, endpointID string) trafficJSON {
	t.Helper()
	r := b.do(t, "GET", "/v1/endpoints/"+endpointID+"/traffic", nil)
	requireStatus(t, http.StatusOK, r)
	return decodeJSON[trafficJSON](t, r)
}

func TestGetEndpointTraffic(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	busy := b.createEndpoint(t, "acme")
	noisy := b.createEndpoint(t, "acme")
	fresh := b.createEndpoint(t, "acme")
	explicit := b.createEndpointIn(t, "acme", "low")
	// Two hours at 2 requests/s: 2% failing, and 20% failing.
	b.seedTraffic(t, busy.ID, 2*time.Hour, 500*time.Millisecond, 50)
	b.seedTraffic(t, noisy.ID, 2*time.Hour, 500*time.Millisecond, 5)
	before := b.counts(t)

	for _, tc := range []struct {
		name       string
		endpoint   endpointJSON
		want       trafficJSON
		minMinutes int
		reason     string
	}{
		{
			name: "a busy auto endpoint, not yet reclassified", endpoint: busy, minMinutes: 120,
			want: trafficJSON{TrafficClass: "auto", CurrentClass: "trickle", QuietRPS: ptr(2.0), HealthyErrorRate: ptr(0.02),
				ImpliedClass: "medium", Reason: "quiet-time volume 2 rps is in medium's range [1, 20) rps"},
		},
		{
			name: "errors too close to the threshold are warned about", endpoint: noisy, minMinutes: 120,
			want: trafficJSON{TrafficClass: "auto", CurrentClass: "trickle", QuietRPS: ptr(2.0), HealthyErrorRate: ptr(0.2),
				ImpliedClass: "medium"},
			reason: "so expect false trips",
		},
		{
			name: "a new endpoint", endpoint: fresh,
			want:   trafficJSON{TrafficClass: "auto", CurrentClass: "trickle", ImpliedClass: trafficclass.DefaultClass},
			reason: "fewer than the 60 needed, so it takes the default class trickle",
		},
		{
			name: "an explicit class", endpoint: explicit,
			want:   trafficJSON{TrafficClass: "low", CurrentClass: "low", ImpliedClass: trafficclass.DefaultClass},
			reason: "minutes of history",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := b.traffic(t, tc.endpoint.ID)
			require.Equal(t, tc.endpoint.ID, got.EndpointID)
			require.GreaterOrEqual(t, got.HistoryMinutes, tc.minMinutes)
			require.LessOrEqual(t, got.HistoryMinutes, tc.minMinutes+5)
			require.False(t, got.Changed, "GET changes nothing")
			if tc.minMinutes == 0 {
				// Created just now: at most one whole (idle) minute, no
				// rate without one, and no failure rate without attempts.
				require.LessOrEqual(t, got.HistoryMinutes, 1)
				if got.HistoryMinutes == 0 {
					require.Nil(t, got.QuietRPS)
				} else {
					require.Equal(t, ptr(0.0), got.QuietRPS)
				}
				require.Nil(t, got.HealthyErrorRate)
			} else {
				require.NotNil(t, got.QuietRPS)
				require.InDelta(t, *tc.want.QuietRPS, *got.QuietRPS, 1e-9)
				require.NotNil(t, got.HealthyErrorRate)
				require.InDelta(t, *tc.want.HealthyErrorRate, *got.HealthyErrorRate, 1e-9)
			}
			if tc.reason != "" {
				require.Contains(t, got.Reason, tc.reason)
				got.Reason = ""
			}
			tc.want.EndpointID, tc.want.HistoryMinutes = got.EndpointID, got.HistoryMinutes
			tc.want.QuietRPS, tc.want.HealthyErrorRate = got.QuietRPS, got.HealthyErrorRate
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, before, b.counts(t), "measuring writes nothing")
	require.Equal(t, "trickle", b.breaker(t, busy.ID).TrafficClass, "nor changes a class")
}

func TestReclassifyEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	busy := b.createEndpoint(t, "acme")
	b.seedTraffic(t, busy.ID, 2*time.Hour, 500*time.Millisecond, 50)
	// Its breaker is open (under trickle, for an hour: however slowly a
	// busy machine runs the test) when it is reclassified.
	trickle, _ := trafficclass.Builtin(trafficclass.Trickle)
	hour := trickle.Breaker
	hour.OpenDuration, hour.MaxOpenDuration = time.Hour, time.Hour
	b.tripBreaker(t, busy.ID, hour, time.Now(), "dispatcher-1", false)
	open := b.breaker(t, busy.ID)
	require.Equal(t, "open", open.State)

	r := b.do(t, "POST", "/v1/endpoints/"+busy.ID+"/traffic/reclassify", nil)
	requireStatus(t, http.StatusOK, r)
	got := decodeJSON[trafficJSON](t, r)
	require.True(t, got.Changed)
	require.Equal(t, "auto", got.TrafficClass)
	require.Equal(t, "medium", got.CurrentClass, "the endpoint runs under the new class")
	require.Equal(t, "medium", got.ImpliedClass)
	require.Equal(t, "quiet-time volume 2 rps is in medium's range [1, 20) rps", got.Reason)
	require.InDelta(t, 2, *got.QuietRPS, 1e-9)

	// The change is recorded with its figures.
	changes, err := b.store.ListClassChanges(ctx, busy.ID, 10)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	require.Equal(t, "trickle", changes[0].OldClass)
	require.Equal(t, "medium", changes[0].NewClass)
	require.InDelta(t, 2, changes[0].Measurement.QuietRPS, 1e-9)
	require.InDelta(t, 0.02, changes[0].Measurement.HealthyErrorRate, 1e-9)
	require.Equal(t, got.HistoryMinutes, changes[0].Measurement.Minutes)
	require.Equal(t, got.Reason, changes[0].Reason)

	// The endpoint stays auto; its breaker runs under the new class and
	// keeps its state.
	e := decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+busy.ID, nil))
	require.Equal(t, "auto", e.TrafficClass)
	after := b.breaker(t, busy.ID)
	require.Equal(t, "medium", after.TrafficClass)
	require.Equal(t, "30s", after.Window)
	require.Equal(t, "open", after.State)
	require.Equal(t, open.Generation, after.Generation)
	require.Equal(t, open.OpenUntil, after.OpenUntil)
	now := b.traffic(t, busy.ID)
	require.Equal(t, "medium", now.CurrentClass)
	require.False(t, now.Changed)

	// Again: nothing to change, nothing recorded.
	again := decodeJSON[trafficJSON](t, b.do(t, "POST", "/v1/endpoints/"+busy.ID+"/traffic/reclassify", nil))
	require.False(t, again.Changed)
	require.Equal(t, "medium", again.CurrentClass)
	changes, err = b.store.ListClassChanges(ctx, busy.ID, 10)
	require.NoError(t, err)
	require.Len(t, changes, 1)

	// A new auto endpoint is already in the class its short history implies.
	fresh := b.createEndpoint(t, "acme")
	got = decodeJSON[trafficJSON](t, b.do(t, "POST", "/v1/endpoints/"+fresh.ID+"/traffic/reclassify", nil))
	require.False(t, got.Changed)
	require.Equal(t, trafficclass.DefaultClass, got.CurrentClass)
	changes, err = b.store.ListClassChanges(ctx, fresh.ID, 10)
	require.NoError(t, err)
	require.Empty(t, changes)
}

func TestReclassifyRefusesAnExplicitClass(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, class := range []string{"high", "trickle"} {
		e := b.createEndpointIn(t, "acme", class)
		b.seedTraffic(t, e.ID, 2*time.Hour, 500*time.Millisecond, 50)
		before := b.counts(t)
		p := requireProblem(t, http.StatusConflict, b.do(t, "POST", "/v1/endpoints/"+e.ID+"/traffic/reclassify", nil))
		require.Equal(t, api.ProblemTypeBase+"conflict", p.Type)
		require.Contains(t, p.Detail, "the endpoint has an explicit traffic class")
		require.Equal(t, before, b.counts(t), "nothing written")
		got := b.traffic(t, e.ID)
		require.Equal(t, class, got.CurrentClass, "its class is unchanged")
		require.Equal(t, "medium", got.ImpliedClass, "though its traffic implies another")
	}
}

func TestTrafficOfAMissingEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	gone := b.createEndpoint(t, "acme")
	requireStatus(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/endpoints/"+gone.ID, nil))
	for _, id := range []string{gone.ID, missingID("ep")} {
		requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/endpoints/"+id+"/traffic", nil))
		requireProblem(t, http.StatusNotFound, b.do(t, "POST", "/v1/endpoints/"+id+"/traffic/reclassify", nil))
	}
}
