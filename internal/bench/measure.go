package main

import (
	"math"
	"slices"
	"time"
)

// window is a measured interval of a scenario, on its clock.
type window struct{ from, to time.Duration }

func (w window) seconds() float64 { return (w.to - w.from).Seconds() }

// measurement is what the receiver saw of one group in a window.
type measurement struct {
	// Delivered counts the group's first 2xx answers within the window.
	Delivered int
	// Messages counts the group's messages accepted within the window.
	Messages int
	// Latencies are accepted -> 2xx latencies of the deliveries of messages
	// accepted within the window, sorted.
	Latencies []time.Duration
	// Missing counts deliveries of messages accepted within the window that
	// never got a 2xx.
	Missing int
}

// measure dedupes the 2xx answers (first per message and path) and returns
// group g's deliveries in w and the latencies of messages accepted in w.
// wantPerMessage is the number of deliveries each message gets (its fan-out).
func (t *tracker) measure(events []delivered, g int, w window, wantPerMessage int) measurement {
	t.mu.Lock()
	defer t.mu.Unlock()
	var m measurement
	seen := make(map[string]struct{}, len(events))
	got := map[string]int{}
	for _, e := range events {
		if groupOf(e.path) != g {
			continue
		}
		key := e.msg + "|" + e.path
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		if e.at >= w.from && e.at < w.to {
			m.Delivered++
		}
		a, ok := t.msgs[e.msg]
		if !ok || a.at < w.from || a.at >= w.to {
			continue
		}
		got[e.msg]++
		m.Latencies = append(m.Latencies, max(e.at-a.at, 0))
	}
	for id, a := range t.msgs {
		if a.group == g && a.at >= w.from && a.at < w.to {
			m.Messages++
			m.Missing += max(wantPerMessage-got[id], 0)
		}
	}
	slices.Sort(m.Latencies)
	return m
}

// percentile returns the q-quantile (nearest rank) of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// bucketLatency is the accepted -> delivered latency of the deliveries of
// the messages accepted in one bucket (a second, a minute) of a window.
type bucketLatency struct {
	// AtS is the bucket's start, in seconds from the window's.
	AtS   int     `json:"at_s"`
	N     int     `json:"n"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// latencyBy buckets the first 2xx answer per message and path of group g
// by the bucket of width (from w.from) its message was accepted in, so late
// deliveries can be set against what happened meanwhile.
func (t *tracker) latencyBy(events []delivered, g int, w window, width time.Duration) []bucketLatency {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[string]struct{}, len(events))
	buckets := map[int][]time.Duration{}
	for _, e := range events {
		if groupOf(e.path) != g {
			continue
		}
		key := e.msg + "|" + e.path
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		a, ok := t.msgs[e.msg]
		if !ok || a.at < w.from || a.at >= w.to {
			continue
		}
		i := int((a.at - w.from) / width)
		buckets[i] = append(buckets[i], max(e.at-a.at, 0))
	}
	out := make([]bucketLatency, 0, len(buckets))
	for i, lat := range buckets {
		slices.Sort(lat)
		out = append(out, bucketLatency{AtS: i * int(width/time.Second), N: len(lat), P50Ms: round1(ms(percentile(lat, 0.5))),
			P99Ms: round1(ms(percentile(lat, 0.99))), MaxMs: round1(ms(lat[len(lat)-1]))})
	}
	slices.SortFunc(out, func(a, b bucketLatency) int { return a.AtS - b.AtS })
	return out
}
