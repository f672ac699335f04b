package replay_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/replay"
)

// TestTallyDetectionsAreBounded: a tally summed over many incidents keeps
// their detection times one by one up to ExactDetections, then folds them
// into a histogram whose size does not grow with the incidents; the count
// and the slowest stay exact, the median within DetectPrecision, whether
// the incidents are added one by one or as sums of sums.
func TestTallyDetectionsAreBounded(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, replay.ExactDetections, replay.ExactDetections + 1, 40_000, 160_000} {
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		var one, sums replay.Tally
		var part replay.Tally
		var all []time.Duration
		for i := range n {
			d := time.Duration(rng.Int64N(int64(90*time.Second))) + time.Millisecond
			if i%97 == 0 {
				d = 0 // an open on the incident's first row
			}
			all = append(all, d)
			single := replay.Tally{Incidents: 1, Detections: []time.Duration{d}}
			one.Add(single)
			part.Add(single)
			if i%1000 == 999 {
				sums.Add(part)
				part = replay.Tally{}
			}
		}
		sums.Add(part)
		slices.Sort(all)
		median, slowest := all[(n-1)/2], all[n-1]
		for name, tl := range map[string]replay.Tally{"one by one": one, "sums of sums": sums} {
			f := tl.Figures()
			require.Equal(t, n, f.IncidentsDetected, name)
			require.Equal(t, n, f.Incidents, name)
			require.Equal(t, slowest, f.DetectMax, name)
			require.LessOrEqual(t, len(tl.Detections), replay.ExactDetections, name)
			require.LessOrEqual(t, replay.TallySize(tl), 20_000, "%s: the histogram spans 1 ms to 90 s, whatever the incidents", name)
			if n <= replay.ExactDetections {
				require.Equal(t, median, f.DetectMedian, "%s: exact up to ExactDetections", name)
				continue
			}
			require.InEpsilon(t, float64(median), float64(f.DetectMedian), replay.DetectPrecision, name)
		}
	}
}
