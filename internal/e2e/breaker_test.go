package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// fastClass is the breaker issue's fast test class.
var fastClass = map[string]any{
	"name": "fast", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 20,
	"open_duration": "2s", "half_open_trials": 3, "half_open_concurrency": 1,
}

// outageReceiver fails one path for a window of time and records every
// request's arrival and concurrency.
type outageReceiver struct {
	mu          sync.Mutex
	failFrom    time.Time
	failUntil   time.Time
	hang        atomic.Bool
	arrivals    []time.Time
	failed      []bool // whether each arrival was answered 5xx
	inFlight    int
	concurrency []int       // in-flight count seen by each arrival, itself included
	healthy     []time.Time // arrivals on the other paths
}

func (o *outageReceiver) respond(r *deliverytest.Request) deliverytest.Response {
	if r.Path != "/sick" {
		o.mu.Lock()
		o.healthy = append(o.healthy, time.Now())
		o.mu.Unlock()
		return deliverytest.Response{Status: http.StatusOK, Delay: 10 * time.Millisecond}
	}
	now := time.Now()
	o.mu.Lock()
	o.inFlight++
	failing := !now.Before(o.failFrom) && now.Before(o.failUntil) && !o.hang.Load()
	o.arrivals = append(o.arrivals, now)
	o.failed = append(o.failed, failing)
	o.concurrency = append(o.concurrency, o.inFlight)
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.inFlight--
		o.mu.Unlock()
	}()
	if o.hang.Load() {
		return deliverytest.Response{Hang: true}
	}
	if failing {
		return deliverytest.Response{Status: http.StatusInternalServerError, Delay: 30 * time.Millisecond}
	}
	return deliverytest.Response{Status: http.StatusOK, Delay: 30 * time.Millisecond}
}

type span struct {
	from, to time.Time
	state    string
}

// nonClosedSpans returns the periods the endpoint's breaker was not closed.
func nonClosedSpans(t *testing.T, db *storetest.DB, endpointID string) (spans []span, halfOpens int) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT at, to_state FROM breaker_transitions WHERE endpoint_id = $1 ORDER BY id`, endpointID)
	require.NoError(t, err)
	defer rows.Close()
	var cur *span
	for rows.Next() {
		var at time.Time
		var to string
		require.NoError(t, rows.Scan(&at, &to))
		if cur != nil {
			cur.to = at
			spans = append(spans, *cur)
			cur = nil
		}
		if to == "half_open" {
			halfOpens++
		}
		if to != "closed" {
			cur = &span{from: at, state: to}
		}
	}
	if cur != nil {
		cur.to = time.Now().Add(time.Hour)
		spans = append(spans, *cur)
	}
	return spans, halfOpens
}

// thresholdReached returns the first arrival from `from` on at which the
// receiver's own record satisfies the fast class's trip rule over the
// window before it (at least min_throughput requests, at least half of them
// answered 5xx), or false if none does.
func thresholdReached(arrivals []time.Time, failed []bool, from time.Time, window time.Duration, minThroughput int, rate float64) (time.Time, bool) {
	for i, at := range arrivals {
		if at.Before(from) {
			continue
		}
		var n, f int
		for j := i; j >= 0 && at.Sub(arrivals[j]) < window; j-- {
			n++
			if failed[j] {
				f++
			}
		}
		if n >= minThroughput && float64(f) >= rate*float64(n) {
			return at, true
		}
	}
	return time.Time{}, false
}

// TestBreakerAcrossTwoDispatchers: two dispatchers, an endpoint failing
// everything for 10 s then recovering, under the fast class, next to a
// healthy endpoint. It asserts what must hold at any speed of the machine:
// nothing is lost; never more than one trial in flight; the breaker opens
// within a few evaluations of the trip rule being met; an open breaker lets
// nothing through; the outage's traffic is what got through before the
// trip plus the probes; the healthy endpoint is untouched. Rates and
// latencies are the benchmark's to measure.
func TestBreakerAcrossTwoDispatchers(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	o := &outageReceiver{}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: o.respond})
	api := StartAPI(t, db.URL, nil)
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", fastClass, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	// The fast class, as the figures below use it.
	const (
		window        = 2 * time.Second
		minThroughput = 20
		failureRate   = 0.5
		trialsPerHalf = 3 // half_open_trials
	)
	// The dispatchers' flush interval: each flush is one evaluation.
	const flush = 100 * time.Millisecond
	env := map[string]string{
		"WORKERS": "30", "REQUEST_TIMEOUT": "2s", "BREAKER_FLUSH_INTERVAL": flush.String(),
		// The first retry waits long (full jitter over 15 s), so retries
		// barely add to the outage's traffic; later ones are quick so every
		// message arrives in the end.
		"RETRY_SCHEDULE": "0s,15s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s",
	}
	d1 := StartDispatcher(t, "dispatcher-1", db.URL, env)
	d2 := StartDispatcher(t, "dispatcher-2", db.URL, env)
	sick := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/sick"), "secret": testSecret, "traffic_class": "fast"})
	healthy := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/ok"), "secret": testSecret, "traffic_class": "fast"})

	// Up to 40 messages/s to both endpoints (fewer on a busy machine): 4 s
	// healthy, 10 s outage, 8 s after.
	const rate = 40
	start := time.Now()
	o.mu.Lock()
	o.failFrom, o.failUntil = start.Add(4*time.Second), start.Add(14*time.Second)
	o.mu.Unlock()
	var sent, waitingSeen int
	ticker := time.NewTicker(time.Second / rate)
	for time.Since(start) < 22*time.Second {
		<-ticker.C
		m := api.SendMessage(t, "acme", "order.created", map[string]any{"n": sent})
		require.Len(t, m.Deliveries, 2)
		sent++
		if waitingSeen == 0 && sent%10 == 0 && time.Since(start) > 4*time.Second {
			// Once the breaker has opened (when depends on how fast this
			// machine sends): refused deliveries say they are waiting for
			// the breaker, and a refusal uses up no attempt.
			var miscounted int
			require.NoError(t, db.Pool.QueryRow(context.Background(), `
				SELECT count(*) FILTER (WHERE d.status = 'waiting' AND d.breaker_open_until IS NOT NULL),
					count(*) FILTER (WHERE d.status = 'waiting' AND d.attempt_count <>
						(SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.id))
				FROM deliveries d WHERE d.endpoint_id = $1`, sick.ID).Scan(&waitingSeen, &miscounted))
			require.Zero(t, miscounted, "a waiting delivery's attempt count is its logged attempts: refusals are not attempts")
		}
	}
	ticker.Stop()
	require.Positive(t, waitingSeen, "deliveries refused by the open breaker are waiting")

	// Nothing lost.
	Eventually(t, 3*time.Minute, 200*time.Millisecond, "every message delivered to both endpoints", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE status = 'delivered'`).Scan(&n))
		return n == 2*sent
	})
	require.Equal(t, sent, rc.Stats("/sick").DistinctDelivered)
	require.Equal(t, sent, rc.Stats("/ok").DistinctDelivered)

	spans, halfOpens := nonClosedSpans(t, db, sick.ID)
	require.NotEmpty(t, spans, "the breaker opened")
	var state string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT state FROM breaker_states WHERE endpoint_id = $1`, sick.ID).Scan(&state))
	require.Equal(t, "closed", state, "the breaker closed after recovery")

	o.mu.Lock()
	arrivals, failed := append([]time.Time(nil), o.arrivals...), append([]bool(nil), o.failed...)
	concurrency, healthyArrivals := append([]int(nil), o.concurrency...), append([]time.Time(nil), o.healthy...)
	failFrom, failUntil := o.failFrom, o.failUntil
	o.mu.Unlock()

	// The rate the sick endpoint would have seen through the outage
	// without a breaker: the healthy one's, same messages, same processes.
	var healthyDuring int
	for _, at := range healthyArrivals {
		if !at.Before(failFrom) && at.Before(failUntil) {
			healthyDuring++
		}
	}
	r := float64(healthyDuring) / failUntil.Sub(failFrom).Seconds()

	// It opens within a few evaluations of the trip rule being met, as the
	// receiver saw the rule met (outcomes reach the shared window with the
	// next flush; the window is bucketed, one bucket a twentieth of it).
	opened := spans[0].from
	require.Equal(t, "open", spans[0].state)
	require.False(t, opened.Before(failFrom), "not open before the outage (opened %s, outage from %s)", opened, failFrom)
	const evaluations = 10
	slack := evaluations*flush + window/20
	reached, ok := thresholdReached(arrivals, failed, failFrom, window, minThroughput, failureRate)
	if ok {
		require.LessOrEqual(t, opened.Sub(reached), slack,
			"opened %s after the trip rule was met: more than %d evaluations", opened.Sub(reached), evaluations)
	} else {
		reached = opened // met on the window's buckets before the receiver's exact window
	}

	// Trials: never more than one in flight (half_open_concurrency), never
	// more than half_open_trials per half-open period. An open breaker lets
	// nothing through once the other dispatcher had a second to hear of it
	// and requests admitted before it finished.
	const straggle = time.Second
	var during, afterTrip, probesConcurrent int
	perSpan := make([]int, len(spans))
	for i, at := range arrivals {
		if !at.Before(failFrom) && at.Before(failUntil) {
			during++
			if at.After(reached) {
				afterTrip++
			}
		}
		for k, sp := range spans {
			if !at.After(sp.from) || !at.Before(sp.to) {
				continue
			}
			switch sp.state {
			case "half_open":
				perSpan[k]++
				probesConcurrent = max(probesConcurrent, concurrency[i])
			case "open":
				if at.Sub(sp.from) > straggle {
					perSpan[k]++
				}
			}
		}
	}
	require.LessOrEqual(t, probesConcurrent, 1, "never more than one trial in flight")
	for k, sp := range spans {
		switch sp.state {
		case "half_open":
			require.LessOrEqual(t, perSpan[k], trialsPerHalf, "half-open period %d admits at most half_open_trials", k)
		case "open":
			require.Zero(t, perSpan[k], "open period %d (from %s) lets nothing through after %s", k, sp.from, straggle)
		}
	}

	// The outage's traffic: what arrived until the trip rule was met, then
	// at most what the slack and the stragglers let through at the healthy
	// rate, plus the probes (a few requests' margin for retries).
	bound := float64(during-afterTrip) + r*(slack+straggle).Seconds() + float64(halfOpens*trialsPerHalf) + 5
	t.Logf("healthy rate %.1f/s; outage requests %d (%d before the trip rule was met, %d after; bound %.1f); opened %s after the rule was met; %d half-open periods; non-closed spans %d",
		r, during, during-afterTrip, afterTrip, bound, opened.Sub(reached).Round(time.Millisecond), halfOpens, len(spans))
	require.LessOrEqual(t, float64(during), bound, "outage traffic within the trip's and the probes' share")
	// Once the trip rule was met, the breaker kept most of the rest of the
	// outage's traffic away. Counted from the rule, not from the outage's
	// start: on a loaded machine the outage's first requests come slowly
	// and the rule (min_throughput of them) is met late, which says
	// nothing of the breaker.
	if rest := failUntil.Sub(reached); rest >= 3*time.Second {
		require.Less(t, float64(afterTrip), 0.5*r*rest.Seconds()+float64(halfOpens*trialsPerHalf),
			"the breaker kept most of the outage's traffic after the trip rule away (%d in %s at %.1f/s)", afterTrip, rest.Round(time.Millisecond), r)
	}

	// The healthy endpoint was never refused and its breaker never moved.
	var hTransitions, notFirstTry int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1`, healthy.ID).Scan(&hTransitions))
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND attempt_count <> 1`, healthy.ID).Scan(&notFirstTry))
	require.Zero(t, hTransitions)
	require.Zero(t, notFirstTry)
	for _, d := range []*Dispatcher{d1, d2} {
		require.Zero(t, metricValue(t, d.MetricsURL, `breaker_rejected_total{endpoint="`+healthy.ID+`"}`))
	}
	require.NotEmpty(t, append(d1.Lines("msg=breaker_opened"), d2.Lines("msg=breaker_opened")...))
	require.NotEmpty(t, append(d1.Lines("msg=breaker_closed"), d2.Lines("msg=breaker_closed")...))
}

// TestKilledTrialHolderDoesNotWedgeTheBreaker: the dispatcher holding the
// half-open trial is killed with SIGKILL mid-probe; the other dispatcher
// probes once the trial's lease (the request timeout + the lease margin)
// has expired, never before, and soon after.
func TestKilledTrialHolderDoesNotWedgeTheBreaker(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	o := &outageReceiver{}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: o.respond})
	api := StartAPI(t, db.URL, nil)
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", fastClass, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	const requestTimeout = 5 * time.Second
	env := map[string]string{"WORKERS": "20", "REQUEST_TIMEOUT": requestTimeout.String(), "RETRY_SCHEDULE": "0s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s"}
	ds := map[int]*Dispatcher{}
	for _, name := range []string{"dispatcher-1", "dispatcher-2"} {
		d := StartDispatcher(t, name, db.URL, env)
		ds[d.cmd.Process.Pid] = d
	}
	sick := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/sick"), "secret": testSecret, "traffic_class": "fast"})
	o.mu.Lock()
	o.failFrom, o.failUntil = time.Now(), time.Now().Add(time.Hour)
	o.mu.Unlock()
	for i := range 60 {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	Eventually(t, 30*time.Second, 20*time.Millisecond, "breaker open", func() bool {
		var s string
		_ = db.Pool.QueryRow(context.Background(), `SELECT state FROM breaker_states WHERE endpoint_id = $1`, sick.ID).Scan(&s)
		return s == "open"
	})
	// The next probe hangs.
	o.mu.Lock()
	before := len(o.arrivals)
	o.mu.Unlock()
	o.hang.Store(true)
	var (
		holder    int
		expiresAt time.Time
	)
	Eventually(t, 30*time.Second, 10*time.Millisecond, "a dispatcher holding the trial's lease", func() bool {
		var actor string
		err := db.Pool.QueryRow(context.Background(), `
			SELECT holder, expires_at FROM trial_leases WHERE endpoint_id = $1 AND expires_at > now()`, sick.ID).Scan(&actor, &expiresAt)
		if err != nil {
			return false
		}
		// The actor is host/pid.
		pid, err := strconv.Atoi(actor[strings.LastIndex(actor, "/")+1:])
		holder = pid
		return err == nil
	})
	victim, ok := ds[holder]
	require.True(t, ok, "the lease holder %d is one of ours", holder)
	// The lease is taken before the probe's request goes: wait for it to
	// hang at the receiver, so that the next arrival is another probe.
	Eventually(t, 10*time.Second, 5*time.Millisecond, "the probe hangs at the receiver", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.arrivals) > before
	})
	o.mu.Lock()
	seen := len(o.arrivals)
	o.mu.Unlock()
	o.hang.Store(false)
	o.mu.Lock()
	o.failUntil = time.Now() // recovered: the next probe succeeds
	o.mu.Unlock()
	require.NoError(t, syscall.Kill(victim.cmd.Process.Pid, syscall.SIGKILL))
	killedAt := time.Now()
	victim.Kill()

	// The lease is the request timeout and the margin; the next probe waits
	// for it, then for the busy retry (1 s and a spread of up to half the
	// class's 2 s open_duration).
	lease := requestTimeout + delivery.DefaultTrialLeaseMargin
	Eventually(t, lease+10*time.Second, 10*time.Millisecond, "another dispatcher probes", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.arrivals) > seen
	})
	o.mu.Lock()
	next := o.arrivals[seen]
	o.mu.Unlock()
	t.Logf("next probe %s after the kill, %s after the lease expired", next.Sub(killedAt).Round(time.Millisecond), next.Sub(expiresAt).Round(time.Millisecond))
	require.False(t, next.Before(expiresAt), "no second trial while the first's lease lived")
	Eventually(t, time.Minute, 50*time.Millisecond, "breaker closed", func() bool {
		var s string
		_ = db.Pool.QueryRow(context.Background(), `SELECT state FROM breaker_states WHERE endpoint_id = $1`, sick.ID).Scan(&s)
		return s == "closed"
	})
	// The survivor's lease goes with the close's commit.
	var leases int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM trial_leases WHERE expires_at > now()`).Scan(&leases))
	require.Zero(t, leases, "no trial lease left behind")
}
