package tuning_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

// TestRecommendationIsBoundedByEndpointsNotIncidents: a pass over a class
// whose evidence has thousands of incidents stores (and the API serves) a
// recommendation that lists at most 20 incidents an endpoint, with the
// count of all of them, so that its size is the same for four times the
// incidents; the counts the decision reads stay exact.
func TestRecommendationIsBoundedByEndpointsNotIncidents(t *testing.T) {
	t.Parallel()
	const listed = 20 // tuning.MaxListedIncidents, the documented cap
	ctx := context.Background()
	b := setup(t, tuning.Config{})
	size := map[int]int{}
	for _, n := range []int{250, 1000} {
		class := fmt.Sprintf("incidents-%d", n)
		b.class(t, class, breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
		// Two endpoints, each with an incident of 15 s every minute at one
		// request a second.
		span := time.Duration(n) * time.Minute
		for i := range 2 {
			b.log(t, b.endpoint(t, class), start, repeated(t, 1, uint64(40+i), span, 0.01, n-1, 15*time.Second, 1))
		}
		b.now = start.Add(span)
		rec, err := b.tuner.Pass(ctx, class, start, start.Add(span), false)
		require.NoError(t, err)
		require.Greater(t, rec.Evidence.Incidents, n, "the evidence finds most of the incidents")
		stored, err := b.st.GetRecommendation(ctx, class)
		require.NoError(t, err)
		var body struct {
			Evidence struct {
				Incidents   int `json:"incidents"`
				PerEndpoint []struct {
					Incidents      []json.RawMessage `json:"incidents"`
					IncidentsTotal *int              `json:"incidents_total"`
				} `json:"per_endpoint"`
			} `json:"evidence"`
		}
		require.NoError(t, json.Unmarshal(stored.Body, &body))
		require.Equal(t, rec.Evidence.Incidents, body.Evidence.Incidents)
		total := 0
		for _, e := range body.Evidence.PerEndpoint {
			require.LessOrEqual(t, len(e.Incidents), listed, "an endpoint lists at most %d incidents", listed)
			require.NotNil(t, e.IncidentsTotal, "an endpoint says how many incidents it had")
			total += *e.IncidentsTotal
		}
		require.Equal(t, body.Evidence.Incidents, total)
		for _, e := range rec.Evidence.PerEndpoint {
			require.LessOrEqual(t, len(e.Incidents), listed, "the recommendation in memory lists at most %d incidents an endpoint", listed)
		}
		size[n] = len(stored.Body)
	}
	t.Logf("stored recommendation: %v bytes by incidents an endpoint", size)
	require.Less(t, float64(size[1000]), 1.2*float64(size[250]), "the same size for four times the incidents")
}

// TestStoredEvidenceBeforeTheCap: the evidence of a change applied before
// the endpoints counted their incidents (every incident listed, no
// incidents_total) is shown with the count of all and the 20 with the
// most failures, in time order; null stays null.
func TestStoredEvidenceBeforeTheCap(t *testing.T) {
	t.Parallel()
	var incidents []map[string]any
	for i := range 30 {
		at := start.Add(time.Duration(i) * time.Hour)
		incidents = append(incidents, map[string]any{"from": at, "to": at.Add(time.Minute), "attempts": 40, "failures": 10 + i%3*10,
			"recorded": false, "recovery_s": 12.5})
	}
	old, err := json.Marshal(map[string]any{"since": start, "until": start.Add(48 * time.Hour), "endpoints": 1, "attempts": 5000,
		"incidents": 30, "quiet_rps": 1.5, "healthy_error_rate": 0.01, "recovery_s_median": 12.5, "quiet_s": 90000,
		"per_endpoint": []map[string]any{{"endpoint_id": "ep_01KKNTQ1T8VQ9FF8Q7A3NCTRXR", "attempts": 5000, "quiet_rps": 1.5,
			"healthy_error_rate": 0.01, "incidents": incidents}}})
	require.NoError(t, err)
	var ev tuning.Evidence
	require.NoError(t, json.Unmarshal(tuning.StoredEvidence(old), &ev))
	require.Equal(t, 30, ev.Incidents)
	require.Len(t, ev.PerEndpoint, 1)
	e := ev.PerEndpoint[0]
	require.Equal(t, 30, e.IncidentsTotal)
	require.Len(t, e.Incidents, tuning.MaxListedIncidents)
	for i, in := range e.Incidents {
		require.GreaterOrEqual(t, in.Failures, 20, "the incidents with the most failures")
		if i > 0 {
			require.True(t, e.Incidents[i-1].From.Before(in.From), "in time order")
		}
	}
	require.JSONEq(t, "null", string(tuning.StoredEvidence(json.RawMessage("null"))))
}
