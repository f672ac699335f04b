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
