package breaker

import "time"

// Window is a rolling window of outcome counts divided into BucketsPerWindow
// buckets of equal width. Buckets are aligned to absolute time, bucket index
// floor(t.UnixNano() / width), so every process puts the same instant in the
// same bucket and windows built from the same outcomes in any order agree.
//
// The window at an instant now is the BucketsPerWindow buckets with index in
// (idx(now)-BucketsPerWindow, idx(now)]. A Window also never reports a bucket
// that has left the window of the newest bucket it holds, so what it reports
// depends only on the set of outcomes added, not on their order. Adding and
// counting cost O(BucketsPerWindow) whatever the number of outcomes.
//
// A Window is a value: copying it copies its counts. Its fields are
// unexported, so persist it as Buckets and rebuild it with NewWindow and Add.
// It keeps the bucket width it was built with: when a config's window
// changes, rebuild it. The zero Window has no width and drops every outcome.
type Window struct {
	width time.Duration
	slots [BucketsPerWindow]slot
	// newest is the index of the newest bucket the slots hold, when held
	// is set: kept by Add, since counting reads it for every outcome.
	newest int64
	held   bool
}

// slot is one ring position: the counts of the bucket index it last held.
// A slot with no counts is free.
type slot struct {
	index     int64
	successes int
	failures  int
}

func (s slot) empty() bool { return s.successes == 0 && s.failures == 0 }

// Bucket is the counts of one live bucket of a Window.
type Bucket struct {
	// Start is the aligned first instant of the bucket, in UTC.
	Start time.Time
	// Successes is the number of successes recorded in the bucket.
	Successes int
	// Failures is the number of failures recorded in the bucket.
	Failures int
}

// BucketSpan is how far back the stored buckets of a window of length win
// reach: win plus a tenth (two bucket widths), so a bucket that straddles
// the window's start, or that a process with a slightly different clock
// counted, is still read. Stores read buckets younger than this and delete
// the older ones.
func BucketSpan(win time.Duration) time.Duration { return win + win/10 }

// NewWindow returns an empty window of c.Window split into BucketsPerWindow
// buckets.
func NewWindow(c Config) Window {
	return Window{width: bucketWidth(c)}
}

// BucketStart returns the aligned start, in UTC, of the bucket of a window of
// c.Window that contains at.
func BucketStart(c Config, at time.Time) time.Time {
	width := bucketWidth(c)
	if width <= 0 {
		return at.UTC()
	}
	return time.Unix(0, bucketIndex(width, at)*int64(width)).UTC()
}

// Width returns the width of one bucket of w: its window divided by
// BucketsPerWindow.
func (w Window) Width() time.Duration {
	return w.width
}

// Add records successes and failures observed at at. An add whose bucket is
// older than the window of the newest bucket w holds is dropped, as is one
// with a negative count or nothing to add.
func (w *Window) Add(at time.Time, successes, failures int) {
	if w.width <= 0 || successes < 0 || failures < 0 || successes+failures == 0 {
		return
	}
	index := bucketIndex(w.width, at)
	if w.held && index <= w.newest-BucketsPerWindow {
		return
	}
	s := &w.slots[ringPosition(index)]
	switch {
	case s.empty() || s.index < index:
		*s = slot{index: index, successes: successes, failures: failures}
	case s.index == index:
		s.successes += successes
		s.failures += failures
	default:
		// The slot already holds a bucket at least a whole window newer,
		// so this one has left the window.
		return
	}
	if !w.held || index > w.newest {
		w.newest, w.held = index, true
	}
}

// Counts returns the number of observations (successes plus failures) and of
// failures in the window at now.
func (w *Window) Counts(now time.Time) (observations, failures int) {
	first, last, ok := w.span(now)
	if !ok {
		return 0, 0
	}
	p := ringPosition(first)
	for index := first; index <= last; index++ {
		if s := &w.slots[p]; s.index == index {
			observations += s.successes + s.failures
			failures += s.failures
		}
		if p++; p == BucketsPerWindow {
			p = 0
		}
	}
	return observations, failures
}

// Buckets returns the non-empty buckets in the window at now, oldest first.
func (w Window) Buckets(now time.Time) []Bucket {
	live, n := w.live(now)
	if n == 0 {
		return nil
	}
	buckets := make([]Bucket, 0, n)
	for _, s := range live[:n] {
		buckets = append(buckets, Bucket{
			Start:     time.Unix(0, s.index*int64(w.width)).UTC(),
			Successes: s.successes,
			Failures:  s.failures,
		})
	}
	return buckets
}

// live returns the non-empty slots in the window at now, oldest first, in
// the first n elements of an array so that counting allocates nothing.
func (w *Window) live(now time.Time) (live [BucketsPerWindow]slot, n int) {
	first, last, ok := w.span(now)
	if !ok {
		return live, 0
	}
	for index := first; index <= last; index++ {
		if s := w.slots[ringPosition(index)]; !s.empty() && s.index == index {
			live[n] = s
			n++
		}
	}
	return live, n
}

// span returns the bucket indexes of the window at now, first to last, or
// false when w holds nothing. The window ends at now's bucket and reaches
// BucketsPerWindow back from it, or from the newest bucket held when that
// is later (a clock behind the one that added it). A slot never holds an
// empty bucket (Add adds something), so a slot whose index is in the span
// is live.
func (w *Window) span(now time.Time) (first, last int64, ok bool) {
	if !w.held {
		return 0, 0, false
	}
	last = bucketIndex(w.width, now)
	return max(last, w.newest) - BucketsPerWindow + 1, last, true
}

func bucketWidth(c Config) time.Duration {
	return c.Window / BucketsPerWindow
}

// bucketIndex returns floor(at.UnixNano() / width).
func bucketIndex(width time.Duration, at time.Time) int64 {
	n, d := at.UnixNano(), int64(width)
	q := n / d
	if n%d != 0 && n < 0 {
		q--
	}
	return q
}

func ringPosition(index int64) int {
	p := index % BucketsPerWindow
	if p < 0 {
		p += BucketsPerWindow
	}
	return int(p)
}
