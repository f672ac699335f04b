package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// S7: steady state under retention. RETENTION=3m and PARTITION_INTERVAL=1m,
// a fixed offered rate of half of S1's closed-loop message rate (the
// committed S1's when S1 does not run first) over S1's layout for 12
// minutes. Every minute it records each table's pg_total_relation_size
// (they must level off: the last 4 minutes within 15% of each other); every
// second the deliveries the receiver saw and the partitions the maintainer
// had dropped, so the throughput in the seconds around each drop can be set
// against the seconds between (>= 0.9x); the probe records the longest
// lock wait any statement saw.

// s7FallbackRate is half of the committed S1 closed loop's 334 messages/s,
// offered when S1 has not run in this invocation.
const s7FallbackRate = 167

// s7Tables are the tables whose size S7 follows: the partitioned ones
// (every partition summed) and the rest that grow with traffic.
var s7Tables = []string{"messages", "message_payloads", "deliveries", "delivery_attempts", "idempotency_keys", "river_job"}

// sizeSample is every followed table's total size at one minute.
type sizeSample struct {
	AtS   float64          `json:"at_s"`
	Bytes map[string]int64 `json:"bytes"`
}

// dropSecond is a second of the run in which the maintainer dropped
// partitions.
type dropSecond struct {
	AtS     float64 `json:"at_s"`
	Dropped float64 `json:"partitions"`
}

func runS7(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	set := b.fanSet()
	rate := b.halfRate
	source := "S1's half load in this run"
	if rate == 0 {
		rate = p.s7Rate
		source = "half of the committed S1 closed loop"
	}
	res := &scenarioResult{
		Layout: describeFan(set),
		Load: fmt.Sprintf("open loop: %.0f messages/s (%s) for %s; RETENTION=%s, PARTITION_INTERVAL=%s; receiver answers 200 at once",
			rate, source, p.s7Duration, p.s7Retention, p.s7Interval),
		Settings: b.river.env(),
	}
	s, err := b.newStage(ctx, "s7", nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := registerEndpoints(ctx, s.client, s.rcv, b.secret, 32, set); err != nil {
		return nil, err
	}
	env := map[string]string{
		"RETENTION":          p.s7Retention.String(),
		"PAYLOAD_RETENTION":  p.s7Retention.String(),
		"PARTITION_INTERVAL": p.s7Interval.String(),
	}
	for k, v := range env {
		res.Settings[k] = v
	}
	if _, err := s.startDispatcher(ctx, env); err != nil {
		return nil, err
	}
	pr, err := s.begin(ctx, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	base := s.rcv.total()
	t0 := s.clock.now()
	lctx, cancel := context.WithTimeout(ctx, p.s7Duration)
	var (
		perSecond []float64 // deliveries seen in each second of the run
		drops     []dropSecond
		sizes     []sizeSample
		wg        sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, lastDropped := s.rcv.total(), 0.0
		for i := 1; ; i++ {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			now := s.rcv.total()
			perSecond = append(perSecond, float64(now-last))
			last = now
			if m, err := s.metrics(lctx, "hookd_partitions_dropped_total"); err == nil {
				if d := m["hookd_partitions_dropped_total"]; d > lastDropped {
					drops = append(drops, dropSecond{AtS: float64(i), Dropped: d - lastDropped})
					lastDropped = d
				}
			}
			if i%60 == 0 {
				if sm, err := s.tableSizes(lctx, float64(i), s7Tables); err == nil {
					sizes = append(sizes, sm)
				}
			}
		}
	})
	s.tracker.openLoop(lctx, rate, 64, roundRobin(set))
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		pr.stop()
		return nil, ctx.Err()
	}
	w := window{from: t0, to: t0 + p.s7Duration}
	res.Drained = s.tracker.drain(ctx, p.drain, 0)
	if err := pr.end(ctx, res, s.rcv.total()-base); err != nil {
		return nil, err
	}
	m := s.tracker.measure(s.rcv.snapshot(), 0, w, set.perTenant)
	fill(res, m, w)

	around, between := dropThroughput(perSecond, drops, 2)
	ratio := 0.0
	if between > 0 {
		ratio = around / between
	}
	level, spread := levelledOff(sizes, 4)
	res.Extra = map[string]any{
		"offered_msgs_per_s":             rate,
		"table_bytes_per_minute":         sizes,
		"drop_seconds":                   drops,
		"deliveries_per_s_around_drops":  round1(around),
		"deliveries_per_s_between_drops": round1(between),
		"around_over_between":            round2(ratio),
		"around_rule":                    "around: the drop's second and the 2 seconds either side; between: every other second after the first minute",
		"sizes_levelled_off":             level,
		"last_4_minutes_spread":          spread,
		"spread_rule":                    "per table, (max - min) / max of its size over the last 4 one-minute samples; levelled off when the total of the followed tables is within 15%",
		"latency_by_accept_second":       s.tracker.latencyBy(s.rcv.snapshot(), 0, w, time.Second),
	}
	return res, s.loadErrors(res, m)
}

// tableSizes reads each of tables' total size, partitions included.
func (s *stage) tableSizes(ctx context.Context, at float64, tables []string) (sizeSample, error) {
	out := sizeSample{AtS: at, Bytes: map[string]int64{}}
	for _, t := range tables {
		var n int64
		// pg_partition_tree lists nothing for a table that is not
		// partitioned.
		err := s.pool.QueryRow(ctx, `
			SELECT CASE WHEN c.relkind = 'p'
				THEN (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree(c.oid))
				ELSE pg_total_relation_size(c.oid) END::bigint
			FROM pg_class c WHERE c.oid = $1::regclass`, t).Scan(&n)
		if err != nil {
			return out, fmt.Errorf("size of %s: %w", t, err)
		}
		out.Bytes[t] = n
	}
	return out, nil
}

// dropThroughput returns the mean deliveries per second in the seconds
// within margin of a drop and in the other seconds, leaving out the first
// minute (the start's partitions and warm-up).
func dropThroughput(perSecond []float64, drops []dropSecond, margin int) (around, between float64) {
	near := map[int]bool{}
	for _, d := range drops {
		for i := int(d.AtS) - margin; i <= int(d.AtS)+margin; i++ {
			near[i] = true
		}
	}
	var na, nb float64
	for i, v := range perSecond {
		sec := i + 1
		if sec <= 60 {
			continue
		}
		if near[sec] {
			around, na = around+v, na+1
		} else {
			between, nb = between+v, nb+1
		}
	}
	if na > 0 {
		around /= na
	}
	if nb > 0 {
		between /= nb
	}
	return around, between
}

// levelledOff reports whether the total size of the followed tables over
// the last n samples stays within 15% of its largest value, and each
// table's spread.
func levelledOff(sizes []sizeSample, n int) (bool, map[string]float64) {
	spread := map[string]float64{}
	if len(sizes) < n {
		return false, spread
	}
	last := sizes[len(sizes)-n:]
	for _, t := range append([]string{"total"}, s7Tables...) {
		lo, hi := math.Inf(1), 0.0
		for _, sm := range last {
			v := float64(sm.Bytes[t])
			if t == "total" {
				for _, tt := range s7Tables {
					v += float64(sm.Bytes[tt])
				}
			}
			lo, hi = min(lo, v), max(hi, v)
		}
		if hi > 0 {
			spread[t] = round2((hi - lo) / hi)
		}
	}
	return spread["total"] <= 0.15, spread
}
