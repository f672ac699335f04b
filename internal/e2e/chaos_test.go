package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// Chaos test knobs, from the environment (`make chaos` sets them):
//
//	HOOKD_CHAOS_DURATION  how long load and faults run (default 40s, the
//	                      short form `go test ./...` runs); every
//	                      chaosCycle of it kills a dispatcher and restarts
//	                      Postgres once
//	HOOKD_CHAOS_SEED      the responder's random seed (default: random,
//	                      logged)
//	HOOKD_CHAOS_REPORT    a file the run's figures are written to as JSON
const (
	chaosShortDuration = 40 * time.Second
	chaosCycle         = time.Minute
	chaosRate          = 20 // messages per second offered
	chaosRequestTO     = 2 * time.Second
	chaosRescueAfter   = 10 * time.Second
)

// chaosSchedule is the retry schedule: ten attempts within about 11 s, so
// every delivery settles soon after the load stops.
var chaosSchedule = delivery.Schedule{0, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}

var chaosEventTypes = []string{"order.created", "order.paid", "invoice.paid", "user.updated"}

// chaosEndpoint is one endpoint of the run and how its receiver behaves.
type chaosEndpoint struct {
	tenant     string
	path       string   // on the receiver; the prefix before the digit says how it answers
	eventTypes []string // nil: every event type
	class      string
	id         string
}

func chaosEndpoints() []*chaosEndpoint {
	return []*chaosEndpoint{
		{tenant: "acme", path: "/acme/steady", class: "chaos"},
		{tenant: "acme", path: "/acme/flaky1", class: "chaos"},
		{tenant: "acme", path: "/acme/flaky2", class: "chaos", eventTypes: []string{"order.*"}},
		// 401 to everything: disabled by its class's auth rule, then held.
		{tenant: "acme", path: "/acme/locked", class: "chaos-auth"},
		// 500 to everything: each delivery fails once its schedule is spent.
		// Shadow breaker, so its deliveries are attempted, not kept waiting.
		{tenant: "acme", path: "/acme/down", class: "chaos-shadow", eventTypes: []string{"invoice.paid"}},
		{tenant: "globex", path: "/globex/steady", class: "chaos"},
		{tenant: "globex", path: "/globex/flaky3", class: "chaos"},
	}
}

// chaosClasses: a fast enforcing breaker, its shadow twin, and an auth rule
// that disables after three 401s.
var chaosClasses = []map[string]any{
	{"name": "chaos", "trip": "rate", "failure_rate_threshold": 0.6, "window": "2s", "min_throughput": 20,
		"open_duration": "1s", "max_open_duration": "2s", "half_open_trials": 2, "half_open_concurrency": 1},
	{"name": "chaos-shadow", "trip": "rate", "failure_rate_threshold": 0.6, "window": "2s", "min_throughput": 20,
		"open_duration": "1s", "max_open_duration": "2s", "enforce": false},
	{"name": "chaos-auth", "window": "2s", "min_throughput": 20, "auth_disable_after": 3, "auth_disable_min_duration": "0s"},
}

// chaosResponder decides every answer of the receiver. A flaky path draws
// its answer at random; once it has answered a webhook-id 2xx it keeps
// answering that id 2xx, as a receiver that dedupes by webhook-id does.
type chaosResponder struct {
	huge []byte

	mu       sync.Mutex
	rnd      *rand.Rand
	firstOK  map[string]time.Time // path + " " + webhook-id -> first 2xx decided
	seen     map[string]bool      // path + " " + webhook-id of every verified request
	injected map[string]int       // answer kind -> count
}

func newChaosResponder(seed uint64) *chaosResponder {
	return &chaosResponder{
		huge:     bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16), // 4 MiB
		rnd:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		firstOK:  map[string]time.Time{},
		seen:     map[string]bool{},
		injected: map[string]int{},
	}
}

func (c *chaosResponder) respond(r *deliverytest.Request) deliverytest.Response {
	key := pathKey(r.Path, r.MsgID)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[key] = true
	kind, resp := c.decide(r.Path, key)
	c.injected[kind]++
	if resp.Status >= 200 && resp.Status <= 299 && !resp.Hang && !resp.CloseConn {
		if _, ok := c.firstOK[key]; !ok {
			c.firstOK[key] = time.Now()
		}
	}
	return resp
}

func (c *chaosResponder) decide(path, key string) (string, deliverytest.Response) {
	ok := deliverytest.Response{Status: http.StatusOK}
	switch {
	case strings.Contains(path, "/steady"):
		return "200", ok
	case strings.Contains(path, "/locked"):
		return "401", deliverytest.Response{Status: http.StatusUnauthorized, Body: []byte(`{"error":"invalid token"}`)}
	case strings.Contains(path, "/down"):
		return "500", deliverytest.Response{Status: http.StatusInternalServerError, Body: []byte("down")}
	}
	if _, done := c.firstOK[key]; done {
		return "200 (already processed)", ok
	}
	switch r := c.rnd.Float64(); {
	case r < 0.36:
		return "200", ok
	case r < 0.44:
		return "200 with a 4 MiB body", deliverytest.Response{Status: http.StatusOK, Body: c.huge}
	case r < 0.50:
		return "200 cut mid-body", deliverytest.Response{Status: http.StatusOK, Body: c.huge[:1<<20], CutBody: true}
	case r < 0.60:
		return "500", deliverytest.Response{Status: http.StatusInternalServerError, Body: []byte("oops")}
	case r < 0.64:
		return "500 with a 4 MiB body", deliverytest.Response{Status: http.StatusInternalServerError, Body: c.huge}
	case r < 0.67:
		return "502 cut mid-body", deliverytest.Response{Status: http.StatusBadGateway, Body: c.huge[:1<<20], CutBody: true}
	case r < 0.74:
		return "hang past the timeout", deliverytest.Response{Hang: true}
	case r < 0.84:
		return "429 Retry-After: 1", deliverytest.Response{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}}
	default:
		return "connection closed", deliverytest.Response{CloseConn: true}
	}
}

// acceptedMessage is a message the api answered 202 for.
type acceptedMessage struct {
	ID         string
	Tenant     string
	EventType  string
	Deliveries map[string]string // endpoint id -> delivery id
}

// chaosLoad offers messages at a steady rate from several clients. Each
// message has an idempotency key and is retried until the api accepts it,
// as a careful client does while Postgres is away.
type chaosLoad struct {
	api    *API
	client *http.Client

	mu         sync.Mutex
	accepted   map[string]*acceptedMessage // by message id
	keys       map[string]string           // idempotency key -> message id
	answers    map[string]int              // "503", "transport error", ... -> count
	unexpected []string
	unaccepted int
	largeSent  int
}

func (l *chaosLoad) run(ctx context.Context, stop <-chan struct{}, rate int) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				l.send(ctx, n)
			}
		}()
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop:
			close(work)
			wg.Wait()
			return
		case <-tick.C:
		}
		select {
		case work <- n:
		case <-stop:
			close(work)
			wg.Wait()
			return
		}
	}
}

func (l *chaosLoad) send(ctx context.Context, n int) {
	tenant := "acme"
	if n%10 >= 7 {
		tenant = "globex"
	}
	eventType := chaosEventTypes[n%len(chaosEventTypes)]
	payload := map[string]any{"n": n, "note": "chaos"}
	if n%50 == 7 {
		// A large payload (workers load payloads from the message row,
		// batched and cached).
		payload["blob"] = strings.Repeat("x", 64<<10+1024)
		l.mu.Lock()
		l.largeSent++
		l.mu.Unlock()
	}
	key := fmt.Sprintf("chaos-%d", n)
	body := map[string]any{"tenant_id": tenant, "event_type": eventType, "payload": payload, "idempotency_key": key}
	backoff := 100 * time.Millisecond
	for {
		a := call(ctx, l.client, "POST", l.api.URL+"/v1/messages", l.api.Token, body)
		kind := fmt.Sprint(a.status)
		if a.err != nil {
			kind = "transport error"
		}
		l.mu.Lock()
		l.answers[kind]++
		l.mu.Unlock()
		if a.err == nil && a.status == http.StatusAccepted {
			var m Message
			if err := json.Unmarshal(a.body, &m); err != nil {
				l.note(fmt.Sprintf("message %d: undecodable 202: %v", n, err))
				return
			}
			am := &acceptedMessage{ID: m.ID, Tenant: tenant, EventType: eventType, Deliveries: map[string]string{}}
			for _, d := range m.Deliveries {
				am.Deliveries[d.EndpointID] = d.ID
			}
			l.mu.Lock()
			if prev, ok := l.keys[key]; ok && prev != m.ID {
				l.unexpected = append(l.unexpected, fmt.Sprintf("key %s accepted as %s and %s", key, prev, m.ID))
			}
			l.keys[key] = m.ID
			l.accepted[m.ID] = am
			l.mu.Unlock()
			return
		}
		// Postgres away: 503 problem+json, or the api cut off mid-request.
		// Anything else is a bug.
		if a.err == nil && a.status != http.StatusServiceUnavailable {
			l.note(fmt.Sprintf("message %d: %d %s", n, a.status, a.body))
		}
		select {
		case <-ctx.Done():
			l.mu.Lock()
			l.unaccepted++
			l.mu.Unlock()
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (l *chaosLoad) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unexpected = append(l.unexpected, s)
}

// fault is one injected fault and the time it could cut attempts short.
type fault struct {
	Kind     string    `json:"kind"`
	At       time.Time `json:"at"`
	Until    time.Time `json:"until"`
	Duration string    `json:"duration"`
}

// chaosReport is what a run reports (and writes to HOOKD_CHAOS_REPORT).
type chaosReport struct {
	Duration         string           `json:"duration"`
	Seed             uint64           `json:"seed"`
	Messages         int              `json:"messages_accepted"`
	LargeMessages    int              `json:"messages_over_inline_limit"`
	Deliveries       int              `json:"deliveries"`
	ByStatus         map[string]int   `json:"deliveries_by_status"`
	Attempts         int              `json:"attempts_logged"`
	ReceiverRequests int              `json:"receiver_requests"`
	Confirmed        int              `json:"receiver_confirmed_distinct"`
	Lost             int              `json:"lost"`
	Duplicates       int              `json:"duplicates"`
	NotRecorded      int              `json:"attempts_whose_record_failed"`
	APIAnswers       map[string]int   `json:"api_answers_to_post_messages"`
	Injected         map[string]int   `json:"receiver_answers"`
	Faults           []fault          `json:"faults"`
	RSS              map[string]int64 `json:"rss_bytes"`
	Goroutines       map[string]int   `json:"goroutines"`
	LedgerLagSeconds float64          `json:"ledger_lag_max_seconds"`
	SettleSeconds    float64          `json:"settle_seconds"`
	TotalSeconds     float64          `json:"total_seconds"`
}

// TestChaosNothingLost is the soak: an api, two dispatchers and a
// receiver whose endpoints fail at random (500, hangs past the timeout,
// 429 with Retry-After, connections closed before and during the answer,
// 4 MiB bodies), one that answers 401 to everything and one that is down.
// Meanwhile a dispatcher is SIGKILLed and restarted, Postgres is restarted
// and Postgres is frozen for 5 s, once per minute of HOOKD_CHAOS_DURATION
// (default 40 s: one of each). Afterwards every accepted message has, for every subscribed
// endpoint, exactly one delivery that is delivered (the receiver confirmed
// its webhook-id with a valid signature, one success logged), failed (its
// schedule spent, every attempt logged) or held (endpoint disabled); nothing
// the receiver confirmed is missing from the log; and a webhook-id arrives
// twice only when its first 2xx came while a fault could cut the attempt
// off from its ledger commit.
func TestChaosNothingLost(t *testing.T) {
	t.Parallel()
	began := time.Now()
	duration := chaosShortDuration
	if v := os.Getenv("HOOKD_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "HOOKD_CHAOS_DURATION")
		require.GreaterOrEqual(t, d, 30*time.Second, "HOOKD_CHAOS_DURATION")
		duration = d
	}
	seed := rand.Uint64()
	if v := os.Getenv("HOOKD_CHAOS_SEED"); v != "" {
		_, err := fmt.Sscan(v, &seed)
		require.NoError(t, err, "HOOKD_CHAOS_SEED")
	}
	t.Logf("chaos: duration %s, seed %d (HOOKD_CHAOS_SEED reproduces the receiver's draws)", duration, seed)
	ctx := context.Background()

	pg := StartCluster(t)
	db := pg.NewDatabase(t, "hookd")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- postgres log (last 30 lines) ---\n%s", lastLines(pg.Log(), 30))
		}
	})
	responder := newChaosResponder(seed)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: responder.respond})
	api := StartAPI(t, db.URL, map[string]string{"NO_MIGRATE": "true"})
	for _, c := range chaosClasses {
		code, err := api.Do(ctx, "POST", "/v1/traffic-classes", c, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, c["name"])
	}
	endpoints := chaosEndpoints()
	byID := map[string]*chaosEndpoint{}
	for _, e := range endpoints {
		body := map[string]any{"tenant_id": e.tenant, "url": rc.URL(e.path), "secret": testSecret, "traffic_class": e.class}
		if e.eventTypes != nil {
			body["event_types"] = e.eventTypes
		}
		e.id = api.CreateEndpoint(t, body).ID
		byID[e.id] = e
	}
	env := map[string]string{
		"WORKERS": "50", "REQUEST_TIMEOUT": chaosRequestTO.String(), "RESCUE_STUCK_AFTER": chaosRescueAfter.String(),
		"RETRY_SCHEDULE": chaosSchedule.String(), "SHUTDOWN_GRACE": "5s",
	}
	survivor := StartDispatcher(t, "dispatcher-1", db.URL, env)
	victim := StartDispatcher(t, "dispatcher-2", db.URL, env)
	dispatchers := []*Dispatcher{survivor, victim}
	report := chaosReport{Duration: duration.String(), Seed: seed, RSS: map[string]int64{}, Goroutines: map[string]int{}}
	rss := func(name string, p *Dispatcher) {
		n, err := p.RSS()
		require.NoError(t, err)
		report.RSS[name] = n
		report.Goroutines[name] = int(metricValue(t, p.MetricsURL, "go_goroutines"))
	}
	rss("dispatcher-1 at start", survivor)

	load := &chaosLoad{api: api, client: &http.Client{Timeout: 30 * time.Second},
		accepted: map[string]*acceptedMessage{}, keys: map[string]string{}, answers: map[string]int{}}
	loadCtx, cancelLoad := context.WithTimeout(ctx, duration+2*time.Minute)
	defer cancelLoad()
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(loadDone)
		load.run(loadCtx, stopLoad, chaosRate)
	}()

	// The faults: per cycle a SIGKILL of dispatcher-2 (restarted 2 s later),
	// a Postgres restart (down 3 s; every other one a crash) and a Postgres
	// freeze (SIGSTOP for 5 s: connections open, no answers).
	var faults []fault
	until := func(at time.Time) {
		if d := time.Until(at); d > 0 {
			time.Sleep(d) // a schedule, not synchronisation
		}
	}
	cycle := min(duration, chaosCycle)
	victims := 1
	for i, c0 := 0, start; !c0.Add(cycle).After(start.Add(duration)); i, c0 = i+1, c0.Add(cycle) {
		until(c0.Add(cycle / 5))
		if i == 0 {
			rss("dispatcher-1 under load", survivor)
			rss("dispatcher-2 before its first kill", victim)
		}
		killAt := time.Now()
		victim.Kill()
		require.False(t, survivor.Exited(), "dispatcher-1 exited: %v", survivor.ExitErr())
		until(killAt.Add(2 * time.Second))
		victims++
		victim = StartDispatcher(t, fmt.Sprintf("dispatcher-2.%d", victims), db.URL, env)
		dispatchers = append(dispatchers, victim)
		faults = append(faults, fault{Kind: "SIGKILL dispatcher-2", At: killAt, Until: killAt, Duration: time.Since(killAt).Round(time.Millisecond).String()})

		until(c0.Add(cycle * 11 / 20))
		kind := "postgres restart (fast)"
		stopAt := time.Now()
		if i%2 == 1 {
			kind = "postgres crash (immediate)"
			pg.Crash(t)
		} else {
			pg.Stop(t)
		}
		until(stopAt.Add(3 * time.Second))
		pg.Start(t)
		faults = append(faults, fault{Kind: kind, At: stopAt, Until: time.Now(), Duration: time.Since(stopAt).Round(time.Millisecond).String()})

		until(c0.Add(cycle * 4 / 5))
		freezeAt := time.Now()
		pg.Freeze(t)
		until(freezeAt.Add(5 * time.Second))
		pg.Thaw(t)
		faults = append(faults, fault{Kind: "postgres frozen (SIGSTOP)", At: freezeAt, Until: time.Now(), Duration: time.Since(freezeAt).Round(time.Millisecond).String()})
		require.False(t, survivor.Exited(), "dispatcher-1 exited: %v", survivor.ExitErr())
		require.False(t, victim.Exited(), "%s exited: %v", victim.Name, victim.ExitErr())
		require.False(t, api.Exited(), "api exited: %v", api.ExitErr())
	}
	until(start.Add(duration))
	close(stopLoad)
	<-loadDone
	loadEnded := time.Now()
	db.Pool.Reset() // its connections died with the last restart

	// Settle: every delivery final and no delivery job left to run (a job
	// whose completion Postgres lost waits for River's rescuer).
	settleBy := time.Now().Add(2 * time.Minute)
	for {
		var open, jobs int
		err := db.Pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM deliveries WHERE status NOT IN ('delivered', 'failed', 'held')),
			(SELECT count(*) FROM river_job WHERE queue = 'deliver' AND state NOT IN ('completed', 'discarded', 'cancelled'))`).Scan(&open, &jobs)
		if err == nil && open == 0 && jobs == 0 {
			break
		}
		if time.Now().After(settleBy) {
			logUnsettled(t, db)
			t.Fatalf("chaos: not settled 2 min after the load stopped: %d deliveries open, %d jobs left (%v)", open, jobs, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	report.SettleSeconds = time.Since(loadEnded).Seconds()
	// Nothing is sent once everything is final.
	quiet := totalRequests(rc, endpoints)
	Consistently(t, 2*time.Second, 100*time.Millisecond, "no request after settling", func() bool {
		return totalRequests(rc, endpoints) == quiet
	})
	rss("dispatcher-1 at end", survivor)
	rss(victim.Name+" at end", victim)
	require.False(t, survivor.Exited(), "dispatcher-1 exited: %v", survivor.ExitErr())
	require.False(t, victim.Exited(), "%s exited: %v", victim.Name, victim.ExitErr())
	for _, p := range []*Proc{survivor.Proc, victim.Proc, api.Proc} {
		require.NoError(t, p.Stop(15*time.Second), "%s stops cleanly on SIGTERM", p.Name)
	}

	load.mu.Lock()
	defer load.mu.Unlock()
	report.Messages = len(load.accepted)
	report.LargeMessages = load.largeSent
	report.APIAnswers = load.answers
	report.Faults = faults
	responder.mu.Lock()
	defer responder.mu.Unlock()
	report.Injected = responder.injected

	v := verifyChaos(t, db, rc, responder, load, endpoints, byID, faults)
	report.Deliveries, report.ByStatus, report.Attempts = v.deliveries, v.byStatus, v.attempts
	report.ReceiverRequests, report.Confirmed, report.Lost, report.Duplicates = v.requests, v.confirmed, v.lost, v.duplicates
	report.LedgerLagSeconds = v.ledgerLag.Seconds()
	for _, d := range dispatchers {
		report.NotRecorded += len(d.Lines("msg=attempt_not_recorded"))
	}
	report.TotalSeconds = time.Since(began).Seconds()

	out, err := json.MarshalIndent(report, "", "  ")
	require.NoError(t, err)
	t.Logf("chaos report:\n%s", out)
	if path := os.Getenv("HOOKD_CHAOS_REPORT"); path != "" {
		require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
	}
	if len(v.violations) > 0 {
		n := min(len(v.violations), 30)
		t.Fatalf("chaos: %d violations (lost %d), the first %d:\n%s", len(v.violations), v.lost, n, strings.Join(v.violations[:n], "\n"))
	}
	require.Zero(t, v.lost)
	require.Positive(t, v.byStatus["delivered"])
	require.Positive(t, v.byStatus["failed"], "the down endpoint's deliveries fail")
	require.Positive(t, v.byStatus["held"], "the 401 endpoint's deliveries are held")
}

func totalRequests(rc *deliverytest.Receiver, endpoints []*chaosEndpoint) int {
	n := 0
	for _, e := range endpoints {
		n += rc.Stats(e.path).Requests
	}
	return n
}

// logUnsettled logs a sample of what is not final yet.
// logAttemptLog logs delivery id's attempts and jobs, to be read against
// the report's faults: what an attempt log that is not exact came from.
func logAttemptLog(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT attempt_number, attempted_at, duration_ms, classification, coalesce(status_code, 0), trial
		FROM delivery_attempts WHERE delivery_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	for rows.Next() {
		var number, code int
		var at time.Time
		var ms float64
		var class string
		var trial bool
		require.NoError(t, rows.Scan(&number, &at, &ms, &class, &code, &trial))
		t.Logf("  %s: attempt %d at %s, %.0f ms, %s %d, trial %v", id, number, at.UTC().Format(time.StampMilli), ms, class, code, trial)
	}
	require.NoError(t, rows.Err())
	logJobs(t, pool, id, func(at time.Time) string { return at.UTC().Format(time.StampMilli) })
}

// logJobs logs the jobs of delivery id (its own and its message's), their
// times as when gives them.
func logJobs(t *testing.T, pool *pgxpool.Pool, id string, when func(time.Time) string) {
	t.Helper()
	var jobID, claimJob, claimAttempt *int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT job_id, claim_job, claim_attempt FROM deliveries WHERE id = $1`, id).
		Scan(&jobID, &claimJob, &claimAttempt))
	show := func(v *int64) string {
		if v == nil {
			return "none"
		}
		return fmt.Sprint(*v)
	}
	t.Logf("  %s: job %s, claimed by job %s run %s", id, show(jobID), show(claimJob), show(claimAttempt))
	rows, err := pool.Query(context.Background(), `
		SELECT j.id, j.kind, j.state::text, j.attempt, j.attempted_by, j.created_at, coalesce(j.finalized_at, 'epoch'), coalesce(j.errors::text, '[]')
		FROM river_job j, deliveries d WHERE d.id = $1
			AND (j.args->>'delivery_id' = d.id OR (j.kind = 'deliver_message' AND j.args->>'message_id' = d.message_id))
		ORDER BY j.id`, id)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var jobID int64
		var kind, state, errs string
		var attempt int
		var by []string
		var created, finalized time.Time
		require.NoError(t, rows.Scan(&jobID, &kind, &state, &attempt, &by, &created, &finalized, &errs))
		t.Logf("  %s: job %d %s %s, attempt %d by %v, created %s, finalized %s; errors %s", id, jobID, kind, state, attempt, by,
			when(created), when(finalized), errs)
	}
	require.NoError(t, rows.Err())
}

func logUnsettled(t *testing.T, db *storetest.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT d.id, d.status, d.attempt_count, coalesce(j.state::text, '-'), coalesce(j.attempt, 0),
			coalesce(extract(epoch FROM j.scheduled_at - now()), 0), coalesce(d.last_error, '')
		FROM deliveries d LEFT JOIN river_job j ON j.id = d.job_id
		WHERE d.status NOT IN ('delivered', 'failed', 'held') OR j.state NOT IN ('completed', 'discarded', 'cancelled')
		ORDER BY d.id LIMIT 20`)
	if err != nil {
		t.Logf("unsettled: %v", err)
		return
	}
	var ids []string
	for rows.Next() {
		var id, status, state, lastErr string
		var count, attempt int
		var dueIn float64
		if err := rows.Scan(&id, &status, &count, &state, &attempt, &dueIn, &lastErr); err == nil {
			t.Logf("unsettled: %s %s attempts %d job %s attempt %d due in %.1fs last error %q", id, status, count, state, attempt, dueIn, lastErr)
			ids = append(ids, id)
		}
	}
	rows.Close()
	// Each one's attempts, claim and jobs (with their errors: which
	// dispatcher ran each run, and how each ended).
	for _, id := range ids[:min(len(ids), 5)] {
		logAttemptLog(t, db.Pool, id)
	}
	// The breakers and trial leases of the endpoints with deliveries
	// still parked (waiting without a job): what keeps them parked.
	brows, err := db.Pool.Query(context.Background(), `
		SELECT s.endpoint_id, s.state, s.generation, coalesce(to_char(s.open_until, 'HH24:MI:SS.MS'), '-'),
			(SELECT count(*) FROM deliveries d WHERE d.endpoint_id = s.endpoint_id AND d.status = 'waiting' AND d.job_id IS NULL),
			coalesce((SELECT string_agg(l.holder || ' until ' || to_char(l.expires_at, 'HH24:MI:SS.MS'), ', ') FROM trial_leases l WHERE l.endpoint_id = s.endpoint_id), '-'),
			to_char(now(), 'HH24:MI:SS.MS')
		FROM breaker_states s
		WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.endpoint_id = s.endpoint_id AND d.status = 'waiting' AND d.job_id IS NULL)`)
	if err != nil {
		t.Logf("unsettled breakers: %v", err)
		return
	}
	defer brows.Close()
	for brows.Next() {
		var ep, state, openUntil, leases, now string
		var gen, parked int64
		if err := brows.Scan(&ep, &state, &gen, &openUntil, &parked, &leases, &now); err == nil {
			t.Logf("unsettled: endpoint %s breaker %s generation %d open until %s, %d parked, trial leases %s (now %s)", ep, state, gen, openUntil, parked, leases, now)
		}
	}
}

// chaosVerdict is what verifyChaos found.
type chaosVerdict struct {
	deliveries, attempts, requests, confirmed, lost, duplicates int
	byStatus                                                    map[string]int
	violations                                                  []string
	// ledgerLag is the longest a 2xx answered outside every fault waited
	// for the ledger's commit of it.
	ledgerLag time.Duration
}

type deliveryRow struct {
	id, messageID, endpointID, status string
	attemptCount, series              int
	deliveredAt                       bool
	updatedAt                         time.Time
	rows, maxNumber, distinctNumbers  int
	successes                         int
	lastClass                         string
}

// verifyChaos checks every accepted message against the database and the
// receiver, and every receiver record against the database.
func verifyChaos(t *testing.T, db *storetest.DB, rc *deliverytest.Receiver, responder *chaosResponder, load *chaosLoad,
	endpoints []*chaosEndpoint, byID map[string]*chaosEndpoint, faults []fault) chaosVerdict {
	t.Helper()
	ctx := context.Background()
	v := chaosVerdict{byStatus: map[string]int{}}
	bad := func(format string, args ...any) { v.violations = append(v.violations, fmt.Sprintf(format, args...)) }
	lost := func(format string, args ...any) {
		v.lost++
		bad("LOST "+format, args...)
	}

	// The api answers 202, or 503 problem+json while Postgres is away, and
	// in the end accepts every message offered.
	for _, u := range load.unexpected {
		bad("api: %s", u)
	}
	if load.unaccepted > 0 {
		bad("api: %d messages never accepted", load.unaccepted)
	}

	// The database's messages are exactly the accepted ones.
	rows, err := db.Pool.Query(ctx, `SELECT id FROM messages`)
	require.NoError(t, err)
	stored := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		stored[id] = true
	}
	require.NoError(t, rows.Err())
	for id := range load.accepted {
		if !stored[id] {
			lost("message %s: accepted (202) but not stored", id)
		}
	}
	for id := range stored {
		if load.accepted[id] == nil {
			bad("message %s: stored but never answered 202", id)
		}
	}

	// Every delivery with its attempt log summarised.
	rows, err = db.Pool.Query(ctx, `
		SELECT d.id, d.message_id, d.endpoint_id, d.status, d.attempt_count, d.series, d.delivered_at IS NOT NULL, d.updated_at,
			count(a.id), coalesce(max(a.attempt_number), 0), count(DISTINCT a.attempt_number),
			count(a.id) FILTER (WHERE a.classification = 'success'),
			coalesce((SELECT x.classification FROM delivery_attempts x WHERE x.delivery_id = d.id
				ORDER BY x.attempt_number DESC, x.id DESC LIMIT 1), '')
		FROM deliveries d LEFT JOIN delivery_attempts a ON a.delivery_id = d.id
		GROUP BY d.id`)
	require.NoError(t, err)
	byPair := map[string]*deliveryRow{} // message id + " " + endpoint id
	for rows.Next() {
		d := &deliveryRow{}
		require.NoError(t, rows.Scan(&d.id, &d.messageID, &d.endpointID, &d.status, &d.attemptCount, &d.series, &d.deliveredAt, &d.updatedAt,
			&d.rows, &d.maxNumber, &d.distinctNumbers, &d.successes, &d.lastClass))
		pair := d.messageID + " " + d.endpointID
		if byPair[pair] != nil {
			bad("message %s endpoint %s: two deliveries", d.messageID, d.endpointID)
		}
		byPair[pair] = d
		v.deliveries++
		v.attempts += d.rows
		v.byStatus[d.status]++
	}
	require.NoError(t, rows.Err())
	var orphans int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM delivery_attempts a LEFT JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.id IS NULL OR a.endpoint_id <> d.endpoint_id OR a.message_id <> d.message_id`).Scan(&orphans))
	if orphans > 0 {
		bad("%d attempts logged against no delivery or the wrong one", orphans)
	}
	var dropped int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = 'deliver' AND state IN ('discarded', 'cancelled')`).Scan(&dropped))
	if dropped > 0 {
		bad("%d delivery jobs discarded or cancelled by River", dropped)
	}
	disabled := map[string]bool{}
	rows, err = db.Pool.Query(ctx, `SELECT id FROM endpoints WHERE status = 'disabled'`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		disabled[id] = true
	}
	require.NoError(t, rows.Err())
	for _, e := range endpoints {
		if want := strings.Contains(e.path, "/locked"); disabled[e.id] != want {
			bad("endpoint %s: disabled %t, want %t", e.path, disabled[e.id], want)
		}
	}

	confirmed := map[string]map[string]int{} // path -> webhook-id -> 2xx answers
	for _, e := range endpoints {
		confirmed[e.path] = rc.DeliveredIDs(e.path)
		st := rc.Stats(e.path)
		v.requests += st.Requests
		v.confirmed += st.DistinctDelivered
		if st.BadSignatures > 0 {
			bad("%s: %d requests with a bad signature", e.path, st.BadSignatures)
		}
	}

	// Every accepted message, every subscribed endpoint.
	expected := map[string]bool{}
	for _, m := range load.accepted {
		for _, e := range endpoints {
			if e.tenant != m.Tenant || !subscribed(e.eventTypes, m.EventType) {
				continue
			}
			pair := m.ID + " " + e.id
			expected[pair] = true
			d := byPair[pair]
			if d == nil {
				lost("message %s to %s: no delivery", m.ID, e.path)
				continue
			}
			if m.Deliveries[e.id] != d.id {
				bad("message %s to %s: delivery %s, the 202 said %q", m.ID, e.path, d.id, m.Deliveries[e.id])
			}
			if d.attemptCount != d.maxNumber || d.distinctNumbers != d.rows {
				bad("delivery %s (%s): attempt_count %d, attempts logged %d numbered up to %d (%d distinct)",
					d.id, e.path, d.attemptCount, d.rows, d.maxNumber, d.distinctNumbers)
				logAttemptLog(t, db.Pool, d.id)
			}
			if d.series != 1 {
				bad("delivery %s: series %d", d.id, d.series)
			}
			got := confirmed[e.path][m.ID] > 0
			switch d.status {
			case "delivered":
				if !got {
					lost("delivery %s (%s): marked delivered, the receiver never confirmed %s", d.id, e.path, m.ID)
				}
				if d.successes != 1 || !d.deliveredAt {
					bad("delivery %s (%s): delivered with %d successes logged, delivered_at set %t", d.id, e.path, d.successes, d.deliveredAt)
				}
			case "failed":
				if got {
					bad("delivery %s (%s): failed, yet the receiver confirmed %s", d.id, e.path, m.ID)
				}
				if d.rows == 0 || d.successes > 0 || d.lastClass == "success" || d.attemptCount < len(chaosSchedule) {
					bad("delivery %s (%s): failed with %d attempts logged (%d successes, last %q), attempt_count %d of a %d-step schedule",
						d.id, e.path, d.rows, d.successes, d.lastClass, d.attemptCount, len(chaosSchedule))
				}
			case "held":
				if got {
					bad("delivery %s (%s): held, yet the receiver confirmed %s", d.id, e.path, m.ID)
				}
				if !disabled[e.id] {
					bad("delivery %s (%s): held on an enabled endpoint", d.id, e.path)
				}
			default:
				lost("delivery %s (%s): left %s", d.id, e.path, d.status)
			}
		}
	}
	for pair, d := range byPair {
		if !expected[pair] {
			bad("delivery %s: message %s to endpoint %s, which it is not for", d.id, d.messageID, d.endpointID)
		}
	}

	// Nothing the receiver saw is missing from the log or misrouted.
	for k := range responder.seen {
		path, id, _ := strings.Cut(k, " ")
		e := endpointAt(endpoints, path)
		if e == nil || byPair[id+" "+e.id] == nil {
			bad("%s received %s, which has no delivery there", path, id)
		}
	}
	// How long a 2xx answered outside every fault waited for the ledger to
	// commit it (the ledger's UPDATE stamps updated_at): on a loaded
	// machine longer than a request timeout, and a fault that began within
	// that wait could cut the 2xx off from its commit too.
	for path, ids := range confirmed {
		e := endpointAt(endpoints, path)
		for id, n := range ids {
			d := byPair[id+" "+e.id]
			first, ok := responder.firstOK[pathKey(path, id)]
			if n != 1 || d == nil || d.status != "delivered" || !ok || duringFault(first, faults, 0) {
				continue
			}
			v.ledgerLag = max(v.ledgerLag, d.updatedAt.Sub(first))
		}
	}
	for path, ids := range confirmed {
		e := endpointAt(endpoints, path)
		for id, n := range ids {
			d := byPair[id+" "+e.id]
			if d == nil || d.status != "delivered" || d.successes != 1 {
				bad("%s confirmed %s, which is not logged as delivered", path, id)
			}
			if n < 2 {
				continue
			}
			v.duplicates += n - 1
			// A duplicate is a resend of an attempt whose 2xx came while a
			// fault could cut it off from its ledger commit: a kill, or
			// Postgres away.
			first := responder.firstOK[pathKey(path, id)]
			if !duringFault(first, faults, v.ledgerLag) {
				bad("%s got %s %d times; its first 2xx (%s) was outside every fault (the ledger committed within %s of a 2xx)",
					path, id, n, first.Format(time.RFC3339Nano), v.ledgerLag)
			}
		}
	}
	return v
}

func pathKey(path, id string) string { return path + " " + id }

// duringFault reports whether an attempt answered at `at` could have been
// cut off from its ledger commit by a fault: answered within a request
// timeout and the ledger's commit lag (plus a margin) before the fault
// began, or before it ended.
func duringFault(at time.Time, faults []fault, ledgerLag time.Duration) bool {
	const margin = 2 * time.Second
	for _, f := range faults {
		if !at.Before(f.At.Add(-chaosRequestTO-ledgerLag-margin)) && !at.After(f.Until.Add(margin)) {
			return true
		}
	}
	return false
}

func endpointAt(endpoints []*chaosEndpoint, path string) *chaosEndpoint {
	for _, e := range endpoints {
		if e.path == path {
			return e
		}
	}
	return nil
}

// subscribed applies an endpoint's event type filter the way the store
// does: exact names and "prefix.*" wildcards.
func subscribed(filters []string, eventType string) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		if f == eventType || (strings.HasSuffix(f, ".*") && strings.HasPrefix(eventType, strings.TrimSuffix(f, "*"))) {
			return true
		}
	}
	return false
}
