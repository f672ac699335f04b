package replay

import (
	"math"
	"slices"
	"time"
)

// ExactDetections is how many detection times a Tally keeps one by one.
// Past that, it folds them into a histogram of relative precision
// DetectPrecision, so that a tally's size grows with the spread of its
// detection times, never with the number of incidents: its median
// detection is then within DetectPrecision of the exact one (its count
// and its slowest stay exact).
const ExactDetections = 4096

// DetectPrecision is the relative precision of a folded tally's median
// detection.
const DetectPrecision = 0.001

// detectGamma is the ratio of a histogram bucket's upper bound to its
// lower: a bucket's middle is within DetectPrecision of every value in it.
var (
	detectGamma   = (1 + DetectPrecision) / (1 - DetectPrecision)
	detectLnGamma = math.Log(detectGamma)
)

// detectHist is a histogram of detection times: bucket i (counts[i-lo])
// holds the times in (gamma^(i-1), gamma^i] nanoseconds, zeros the times
// of 0 (an open on the incident's first row).
type detectHist struct {
	n, zeros int
	min, max time.Duration
	lo       int
	counts   []int
}

func (h *detectHist) add(d time.Duration) {
	h.note(1, d, d)
	if d <= 0 {
		h.zeros++
		return
	}
	h.bucket(int(math.Ceil(math.Log(float64(d))/detectLnGamma)), 1)
}

// note counts n more times between lo and hi.
func (h *detectHist) note(n int, lo, hi time.Duration) {
	if h.n == 0 || lo < h.min {
		h.min = lo
	}
	if h.n == 0 || hi > h.max {
		h.max = hi
	}
	h.n += n
}

// bucket adds n to bucket i.
func (h *detectHist) bucket(i, n int) {
	switch {
	case len(h.counts) == 0:
		h.lo, h.counts = i, []int{0}
	case i < h.lo:
		h.counts = append(make([]int, h.lo-i), h.counts...)
		h.lo = i
	case i >= h.lo+len(h.counts):
		h.counts = append(h.counts, make([]int, i-h.lo-len(h.counts)+1)...)
	}
	h.counts[i-h.lo] += n
}

// merge adds o's counts to h.
func (h *detectHist) merge(o *detectHist) {
	if o.n == 0 {
		return
	}
	h.note(o.n, o.min, o.max)
	h.zeros += o.zeros
	for k, n := range o.counts {
		if n > 0 {
			h.bucket(o.lo+k, n)
		}
	}
}

// at returns the k-th smallest time (from 0): the middle of its bucket,
// within [min, max].
func (h *detectHist) at(k int) time.Duration {
	if k < h.zeros {
		return 0
	}
	seen := h.zeros
	for j, n := range h.counts {
		if seen += n; seen > k {
			mid := time.Duration(math.Round(2 * math.Pow(detectGamma, float64(h.lo+j)) / (detectGamma + 1)))
			return min(max(mid, h.min), h.max)
		}
	}
	return h.max
}

// addDetections adds detection times, and another tally's histogram, to
// t's: one by one while they number at most ExactDetections, folded into
// t's own histogram past that.
func (t *Tally) addDetections(ds []time.Duration, o *detectHist) {
	if t.folded == nil && o == nil && len(t.Detections)+len(ds) <= ExactDetections {
		t.Detections = append(t.Detections, ds...)
		return
	}
	if t.folded == nil {
		t.folded = &detectHist{}
	}
	for _, d := range t.Detections {
		t.folded.add(d)
	}
	t.Detections = nil
	for _, d := range ds {
		t.folded.add(d)
	}
	if o != nil {
		t.folded.merge(o)
	}
}

// detectionFigures returns how many incidents t detected, the median
// (the lower middle one of an even count) and the slowest detection.
func (t Tally) detectionFigures() (n int, median, slowest time.Duration) {
	if t.folded == nil || t.folded.n == 0 {
		if len(t.Detections) == 0 {
			return 0, 0, 0
		}
		d := slices.Sorted(slices.Values(t.Detections))
		return len(d), d[(len(d)-1)/2], d[len(d)-1]
	}
	h := t.folded
	if len(t.Detections) > 0 {
		// Detections set beside a histogram (a literal): fold a copy.
		c := *h
		c.counts = slices.Clone(h.counts)
		for _, d := range t.Detections {
			c.add(d)
		}
		h = &c
	}
	return h.n, h.at((h.n - 1) / 2), h.max
}

// Durations is a multiset of durations that keeps them one by one while
// they number at most ExactDetections and past that folds them into a
// histogram of relative precision DetectPrecision, as a Tally does its
// detections: its count stays exact, its median exact up to
// ExactDetections values and within DetectPrecision past them.
type Durations struct {
	exact  []time.Duration
	folded *detectHist
}

// Add adds d.
func (s *Durations) Add(d time.Duration) {
	if s.folded == nil && len(s.exact) < ExactDetections {
		s.exact = append(s.exact, d)
		return
	}
	if s.folded == nil {
		s.folded = &detectHist{}
		for _, x := range s.exact {
			s.folded.add(x)
		}
		s.exact = nil
	}
	s.folded.add(d)
}

// Len returns how many durations s holds.
func (s *Durations) Len() int {
	if s.folded != nil {
		return s.folded.n
	}
	return len(s.exact)
}

// Median returns the median of s, the lower middle one of an even count;
// 0 when s is empty.
func (s *Durations) Median() time.Duration {
	n := s.Len()
	switch {
	case n == 0:
		return 0
	case s.folded != nil:
		return s.folded.at((n - 1) / 2)
	}
	slices.Sort(s.exact)
	return s.exact[(n-1)/2]
}

// Max returns the largest of s; 0 when s is empty.
func (s *Durations) Max() time.Duration {
	if s.folded != nil {
		return s.folded.max
	}
	if len(s.exact) == 0 {
		return 0
	}
	return slices.Max(s.exact)
}
