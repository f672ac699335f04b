package tuning

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// burstyStore is a Store of one class whose endpoints each log the same
// number of attempts over the same range, with incidents bursts among
// them: a pass over it reads no database. Before each endpoint's log and
// at SaveRecommendation, the end of the pass, it measures the live heap
// and keeps the largest: what the pass holds at once (its evidence, the
// bounds of the incidents, its tallies, the recommendation and its
// encoding, and an endpoint's log).
type burstyStore struct {
	Store
	class     trafficclass.Class
	ids       []string
	since     time.Time
	rows      int
	incidents int
	// every, when set, makes the logs a month's history's (internal/bench
	// S8): a delivery of four attempts every every, the first three
	// failing and the fourth failing one delivery in 50.
	every time.Duration
	peak  uint64
	body  int
	calls int
}

// sample notes the live heap.
func (s *burstyStore) sample() {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.peak = max(s.peak, m.HeapAlloc)
}

// The shape of a bursty log: a request every step, and every
// len/incidents requests a burst of burst failures in a row, the rest
// failing one in a hundred.
const (
	burstyStep  = 3 * time.Second
	burstyBurst = 8
)

func (s *burstyStore) GetClass(context.Context, string) (trafficclass.Class, error) {
	return s.class, nil
}

func (s *burstyStore) ClassEndpointIDs(context.Context, string) ([]string, error) { return s.ids, nil }

func (s *burstyStore) ListOpens(context.Context, []string, time.Time, time.Time) ([]store.OpenRecord, error) {
	return nil, nil
}

func (s *burstyStore) GetRecommendation(context.Context, string) (store.Recommendation, error) {
	return store.Recommendation{}, store.ErrNotFound
}

func (s *burstyStore) ListTunings(context.Context, string, int) ([]store.Tuning, error) {
	return nil, nil
}

func (s *burstyStore) StreamEndpointOutcomes(_ context.Context, _ string, since, until time.Time, fn func(store.AttemptOutcome) error) error {
	s.sample()
	if s.every > 0 {
		return s.deliveries(since, until, fn)
	}
	every := s.rows / s.incidents
	for i := range s.rows {
		at := s.since.Add(time.Duration(i) * burstyStep)
		if at.Before(since) || !at.Before(until) {
			continue
		}
		class := "success"
		if k := i % every; k >= every/2 && k < every/2+burstyBurst || i%100 == 0 {
			class = "failure"
		}
		if err := fn(store.AttemptOutcome{ID: int64(i + 1), At: at, Classification: class}); err != nil {
			return err
		}
	}
	return nil
}

// deliveries streams an S8 log: a delivery every s.every from a second
// apart for each endpoint.
func (s *burstyStore) deliveries(since, until time.Time, fn func(store.AttemptOutcome) error) error {
	s.calls++
	n := 0
	for at := since.Add(time.Duration(s.calls%97) * time.Second); at.Before(until); at = at.Add(s.every) {
		n++
		for a := 1; a <= 4; a++ {
			class := "failure"
			if a == 4 && n%50 != 0 {
				class = "success"
			}
			if err := fn(store.AttemptOutcome{ID: int64(4*n + a), At: at.Add(time.Duration(a) * time.Second), Classification: class}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *burstyStore) SaveRecommendation(_ context.Context, r store.Recommendation, _ string, _ map[string]any) error {
	s.sample()
	s.body = len(r.Body)
	return nil
}

// TestPassHeapDoesNotGrowWithIncidents: a pass over endpoints whose logs
// have as many attempts, over as long a range, holds at most about as
// much heap at once with four times the incidents: what it keeps grows
// with the endpoints and the grid, and by the 16 bytes of each
// incident's bounds between its reads of the log, not by a detection per
// incident and config or a listed incident per incident. Not parallel:
// the live heap it measures is the process's.
func TestPassHeapDoesNotGrowWithIncidents(t *testing.T) {
	const (
		endpoints = 4
		rows      = 120_000 // 100 hours at one request every 3 s
		// perIncident bounds the heap a pass holds at its peak for each
		// more incident: the 16 bytes of its bounds, a recovery time (8
		// bytes, up to replay.ExactDetections of them) and slack for the
		// slices' growth; a detection per config was 16 bytes times 24.
		perIncident = 100
	)
	since := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	until := since.Add(rows * burstyStep)
	peak, found := map[int]uint64{}, map[int]int{}
	for _, incidents := range []int{100, 400} {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		st := &burstyStore{class: trafficclass.Default("bursty"), since: since, rows: rows, incidents: incidents}
		st.class.Breaker = breaker.DefaultConfig()
		for i := range endpoints {
			st.ids = append(st.ids, fmt.Sprintf("ep_%d", i))
		}
		tuner := New(Config{}, Deps{Store: st, Now: func() time.Time { return until }})
		rec, _, err := tuner.pass(context.Background(), "bursty", since, until, false, false)
		require.NoError(t, err)
		require.GreaterOrEqual(t, rec.Evidence.Incidents, endpoints*incidents*9/10, "the incidents are found")
		require.NotZero(t, rec.Configs, "the pass replayed the grid: %v", rec.Reasons)
		peak[incidents], found[incidents] = max(st.peak, before.HeapAlloc)-before.HeapAlloc, rec.Evidence.Incidents
		t.Logf("%d incidents an endpoint: %d incidents, %d configs, a peak of %d KB held, a stored body of %d KB",
			incidents, rec.Evidence.Incidents, rec.Configs, peak[incidents]>>10, st.body>>10)
	}
	grown := float64(peak[400]) - float64(peak[100])
	t.Logf("%.0f bytes more held at the peak for each more incident", grown/float64(found[400]-found[100]))
	require.Less(t, grown, float64(perIncident*(found[400]-found[100])), "at most %d bytes an incident", perIncident)
}

// TestPassHeapDoesNotGrowWithAttempts: a pass over a week of a month's
// history as internal/bench S8 loads it (a delivery of four attempts
// every 43 minutes an endpoint at 4 million attempts a month, every 9 at
// 20 million: no incident, too little quiet time to replay) holds, for
// five times the attempts, no more heap at once than the larger log of
// one endpoint it reads (and the spare capacity of its buffer): the
// minutes with traffic are a bit a minute, not a time interval a
// stretch. Not parallel: the live heap it measures is the process's.
func TestPassHeapDoesNotGrowWithAttempts(t *testing.T) {
	const endpoints = 200
	since := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	until := since.Add(7 * 24 * time.Hour)
	peak, held := map[time.Duration]uint64{}, map[time.Duration]int{}
	for _, every := range []time.Duration{43 * time.Minute, 9 * time.Minute} {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		st := &burstyStore{class: trafficclass.Default("trickle"), since: since, every: every}
		st.class.Breaker = breaker.DefaultConfig()
		for i := range endpoints {
			st.ids = append(st.ids, fmt.Sprintf("ep_%d", i))
		}
		tuner := New(Config{}, Deps{Store: st, Now: func() time.Time { return until }})
		rec, used, err := tuner.pass(context.Background(), "trickle", since, until, false, false)
		require.NoError(t, err)
		require.Zero(t, rec.Evidence.Incidents)
		peak[every], held[every] = max(st.peak, before.HeapAlloc)-before.HeapAlloc, used.held
		t.Logf("a delivery every %s: %d attempts, at most %d rows held, a peak of %d KB held, a stored body of %d KB",
			every, rec.Evidence.Attempts, used.held, peak[every]>>10, st.body>>10)
	}
	grown := float64(peak[9*time.Minute]) - float64(peak[43*time.Minute])
	oneLog := 2 * float64(held[9*time.Minute]) * float64(unsafe.Sizeof(replay.Row{}))
	require.Less(t, grown, oneLog+64<<10, "five times the attempts hold no more than one endpoint's larger log")
}
