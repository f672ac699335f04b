package breaker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/hookd/hookd/internal/breaker"
)

// epoch is a bucket-aligned instant for every window in these tests (whole
// seconds are multiples of every bucket width used).
var epoch = time.Unix(1_700_000_000, 0).UTC()

func subSecondConfig() breaker.Config {
	c := breaker.DefaultConfig()
	c.Window = 500 * time.Millisecond // 25ms buckets
	return c
}

func TestBucketStartAlignsToAbsoluteTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		window time.Duration
		at     time.Time
		want   time.Time
	}{
		{"on an edge", 500 * time.Millisecond, epoch.Add(50 * time.Millisecond), epoch.Add(50 * time.Millisecond)},
		{"just after an edge", 500 * time.Millisecond, epoch.Add(50*time.Millisecond + time.Nanosecond), epoch.Add(50 * time.Millisecond)},
		{"just before an edge", 500 * time.Millisecond, epoch.Add(75*time.Millisecond - time.Nanosecond), epoch.Add(50 * time.Millisecond)},
		{"30s window", 30 * time.Second, time.Unix(100, 0), time.Unix(99, 0)},
		{"30s window mid bucket", 30 * time.Second, time.Unix(101, 0), time.Unix(100, 500_000_000)},
		{"100ms window", 100 * time.Millisecond, time.Unix(0, 7_400_000), time.Unix(0, 5_000_000)},
		{"before 1970", 500 * time.Millisecond, time.Unix(0, -1), time.Unix(0, -25_000_000)},
		{"local zone", 500 * time.Millisecond, epoch.Add(30 * time.Millisecond).In(time.FixedZone("X", 3600)), epoch.Add(25 * time.Millisecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := breaker.DefaultConfig()
			c.Window = tt.window
			got := breaker.BucketStart(c, tt.at)
			require.True(t, tt.want.Equal(got), "got %v want %v", got, tt.want)
			require.Equal(t, time.UTC, got.Location())
		})
	}
}

// TestWindowSubSecondBucketEdges steps a fake clock across 25ms bucket edges
// and checks that an outcome leaves the window exactly when its bucket does.
func TestWindowSubSecondBucketEdges(t *testing.T) {
	t.Parallel()
	c := subSecondConfig()
	w := breaker.NewWindow(c)
	require.Equal(t, 25*time.Millisecond, w.Width())

	w.Add(epoch, 0, 1)                                          // first instant of bucket 0
	w.Add(epoch.Add(25*time.Millisecond-time.Nanosecond), 1, 0) // last instant of bucket 0
	w.Add(epoch.Add(25*time.Millisecond), 0, 1)                 // first instant of bucket 1

	tests := []struct {
		at                     time.Duration
		observations, failures int
	}{
		{0, 2, 1}, // bucket 1 is after now, so not in the window at now
		{25 * time.Millisecond, 3, 2},
		{475 * time.Millisecond, 3, 2},
		{500*time.Millisecond - time.Nanosecond, 3, 2},
		{500 * time.Millisecond, 1, 1}, // bucket 0 leaves, with both its outcomes
		{525*time.Millisecond - time.Nanosecond, 1, 1},
		{525 * time.Millisecond, 0, 0},
		{time.Hour, 0, 0},
	}
	for _, tt := range tests {
		obs, fails := w.Counts(epoch.Add(tt.at))
		require.Equal(t, tt.observations, obs, "observations at +%v", tt.at)
		require.Equal(t, tt.failures, fails, "failures at +%v", tt.at)
	}

	// A fake clock stepping 1ms at a time from the newest bucket sees bucket 0
	// leave at +500ms exactly.
	leftAt := time.Duration(-1)
	for now := epoch.Add(25 * time.Millisecond); now.Before(epoch.Add(time.Second)); now = now.Add(time.Millisecond) {
		if obs, _ := w.Counts(now); obs < 3 {
			leftAt = now.Sub(epoch)
			break
		}
	}
	require.Equal(t, 500*time.Millisecond, leftAt)
}

func TestWindowBucketsOldestFirst(t *testing.T) {
	t.Parallel()
	c := subSecondConfig()
	w := breaker.NewWindow(c)
	w.Add(epoch.Add(480*time.Millisecond), 2, 0)
	w.Add(epoch.Add(10*time.Millisecond), 0, 1)
	w.Add(epoch.Add(260*time.Millisecond), 1, 1)
	w.Add(epoch.Add(270*time.Millisecond), 1, 0)

	require.Equal(t, []breaker.Bucket{
		{Start: epoch, Successes: 0, Failures: 1},
		{Start: epoch.Add(250 * time.Millisecond), Successes: 2, Failures: 1},
		{Start: epoch.Add(475 * time.Millisecond), Successes: 2, Failures: 0},
	}, w.Buckets(epoch.Add(490*time.Millisecond)))
	require.Equal(t, []breaker.Bucket{
		{Start: epoch.Add(250 * time.Millisecond), Successes: 2, Failures: 1},
		{Start: epoch.Add(475 * time.Millisecond), Successes: 2, Failures: 0},
	}, w.Buckets(epoch.Add(500*time.Millisecond)))
	require.Nil(t, breaker.NewWindow(c).Buckets(epoch))
}

func TestWindowDropsAddsOlderThanTheWindow(t *testing.T) {
	t.Parallel()
	c := subSecondConfig()
	tests := []struct {
		name     string
		late     time.Duration
		failures int
	}{
		{"a whole window old", 100 * time.Millisecond, 1},        // bucket 4, newest 24: left
		{"oldest live bucket", 125 * time.Millisecond, 2},        // bucket 5: still live
		{"far in the past", -time.Hour, 1},                       // dropped
		{"same ring slot, older", 0, 1},                          // bucket 0 shares bucket 20's slot
		{"same ring slot, in window", 500 * time.Millisecond, 2}, // bucket 20 itself
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := breaker.NewWindow(c)
			w.Add(epoch.Add(500*time.Millisecond), 0, 0) // nothing: not even the newest bucket
			w.Add(epoch.Add(600*time.Millisecond), 0, 1) // bucket 24
			w.Add(epoch.Add(tt.late), 0, 1)
			_, fails := w.Counts(epoch.Add(600 * time.Millisecond))
			require.Equal(t, tt.failures, fails)
		})
	}
}

func TestWindowDropsMeaninglessAdds(t *testing.T) {
	t.Parallel()
	w := breaker.NewWindow(subSecondConfig())
	w.Add(epoch, -1, 2)
	w.Add(epoch, 2, -1)
	w.Add(epoch, 0, 0)
	obs, _ := w.Counts(epoch)
	require.Zero(t, obs)

	var zero breaker.Window
	zero.Add(epoch, 1, 1)
	obs, _ = zero.Counts(epoch)
	require.Zero(t, obs, "the zero Window holds nothing")
}

func TestWindowIsAValue(t *testing.T) {
	t.Parallel()
	w := breaker.NewWindow(subSecondConfig())
	w.Add(epoch, 1, 0)
	copied := w
	copied.Add(epoch, 0, 5)
	obs, _ := w.Counts(epoch)
	require.Equal(t, 1, obs)
}

type timedOutcome struct {
	at      time.Duration
	failure bool
}

func timedOutcomes(span time.Duration) *rapid.Generator[[]timedOutcome] {
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) timedOutcome {
		return timedOutcome{
			at:      time.Duration(rapid.Int64Range(0, int64(span)).Draw(t, "at")),
			failure: rapid.Bool().Draw(t, "failure"),
		}
	}), 0, 200)
}

func addAll(w *breaker.Window, outcomes []timedOutcome) {
	for _, o := range outcomes {
		if o.failure {
			w.Add(epoch.Add(o.at), 0, 1)
		} else {
			w.Add(epoch.Add(o.at), 1, 0)
		}
	}
}

// TestWindowInterleavingsAgree feeds two windows, standing for two processes,
// the same outcomes in different orders and checks they report the same
// buckets at every instant.
func TestWindowInterleavingsAgree(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := breaker.DefaultConfig()
		c.Window = time.Duration(rapid.Int64Range(int64(breaker.MinWindow), int64(2*time.Second)).Draw(t, "window"))
		outcomes := timedOutcomes(3*c.Window).Draw(t, "outcomes")
		shuffled := rapid.Permutation(outcomes).Draw(t, "shuffled")

		first, second := breaker.NewWindow(c), breaker.NewWindow(c)
		addAll(&first, outcomes)
		addAll(&second, shuffled)

		queries := []time.Duration{0, 3 * c.Window, 4 * c.Window}
		for _, o := range outcomes {
			queries = append(queries, o.at, o.at+c.Window/2)
		}
		for _, q := range queries {
			now := epoch.Add(q)
			require.Equal(t, first.Buckets(now), second.Buckets(now), "buckets at +%v", q)
			obs1, fails1 := first.Counts(now)
			obs2, fails2 := second.Counts(now)
			require.Equal(t, [2]int{obs1, fails1}, [2]int{obs2, fails2}, "counts at +%v", q)
		}
	})
}

// TestWindowMatchesNaiveModel checks Counts against a direct computation over
// every outcome ever added: those whose bucket is in the window at now and has
// not left the window of the newest bucket added.
func TestWindowMatchesNaiveModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := breaker.DefaultConfig()
		c.Window = time.Duration(rapid.Int64Range(int64(breaker.MinWindow), int64(2*time.Second)).Draw(t, "window"))
		width := int64(c.Window / breaker.BucketsPerWindow)
		outcomes := timedOutcomes(3*c.Window).Draw(t, "outcomes")
		w := breaker.NewWindow(c)
		addAll(&w, outcomes)

		index := func(d time.Duration) int64 { return epoch.Add(d).UnixNano() / width }
		var newest int64
		for i, o := range outcomes {
			if i == 0 || index(o.at) > newest {
				newest = index(o.at)
			}
		}
		now := time.Duration(rapid.Int64Range(0, int64(4*c.Window)).Draw(t, "now"))
		var wantObs, wantFails int
		for _, o := range outcomes {
			i := index(o.at)
			if i <= index(now) && i > index(now)-breaker.BucketsPerWindow && i > newest-breaker.BucketsPerWindow {
				wantObs++
				if o.failure {
					wantFails++
				}
			}
		}
		obs, fails := w.Counts(epoch.Add(now))
		require.Equal(t, wantObs, obs)
		require.Equal(t, wantFails, fails)
	})
}
