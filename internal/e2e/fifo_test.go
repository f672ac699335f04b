package e2e

import (
	"context"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// orderedReceiver answers a FIFO endpoint's requests and records the
// order of first successful receipts, by webhook-id (the message id).
type orderedReceiver struct {
	mu      sync.Mutex
	rnd     *rand.Rand
	fail    float64 // the share of requests answered 500, at random
	down    bool    // answer every request 500
	hangAt  int     // hang the request of this arrival number (0: none)
	hung    chan struct{}
	seen    map[string]bool
	first   []string
	arrived int
}

func newOrderedReceiver(fail float64, seed uint64) *orderedReceiver {
	return &orderedReceiver{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), fail: fail, hung: make(chan struct{}), seen: map[string]bool{}}
}

func (o *orderedReceiver) respond(r *deliverytest.Request) deliverytest.Response {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.arrived++
	if o.arrived == o.hangAt {
		close(o.hung)
		return deliverytest.Response{Hang: true}
	}
	if o.down || o.rnd.Float64() < o.fail {
		return deliverytest.Response{Status: http.StatusInternalServerError}
	}
	if !o.seen[r.MsgID] {
		o.seen[r.MsgID] = true
		o.first = append(o.first, r.MsgID)
	}
	return deliverytest.Response{Status: http.StatusOK}
}

func (o *orderedReceiver) firstReceipts() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.first...)
}

// sendInOrder accepts n messages for tenant acme in batches of 100, one
// batch after the other, and returns their ids in acceptance order.
func sendInOrder(t *testing.T, api *API, from, n int) []string {
	t.Helper()
	var ids []string
	for start := from; start < from+n; start += 100 {
		msgs := make([]map[string]any, 0, 100)
		for i := start; i < min(start+100, from+n); i++ {
			msgs = append(msgs, map[string]any{"tenant_id": "acme", "event_type": "order.updated", "payload": map[string]any{"seq": i}})
		}
		var res struct {
			Results []struct {
				ID string `json:"id"`
			} `json:"results"`
		}
		code, err := api.Do(context.Background(), "POST", "/v1/messages/batch", map[string]any{"messages": msgs}, &res)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		for _, r := range res.Results {
			require.NotEmpty(t, r.ID, "accepted")
			ids = append(ids, r.ID)
		}
	}
	return ids
}

var riverClientRE = regexp.MustCompile(`msg=dispatcher_started .*river_client=(\S+)`)

// TestFIFOOrderSurvivesAKilledDispatcher: 1,000 messages to a FIFO
// endpoint whose receiver fails 20% of requests at random, through two
// dispatchers; the one sending the head is SIGKILLed mid-request. Every
// message is received, one request at a time, and the order of first
// successful receipts is the order of acceptance: the kill made the head
// wait for River's rescuer and be sent again, never a later one first.
func TestFIFOOrderSurvivesAKilledDispatcher(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	const messages = 1000
	o := newOrderedReceiver(0.2, 25)
	o.hangAt = 350
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: o.respond})
	api := StartAPI(t, db.URL, nil)
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/fifo"), "secret": testSecret, "ordering": "fifo"})
	// A short schedule, long enough that 20% failures never exhaust it
	// (0.2^30); a rescue as soon as the request timeout allows.
	env := map[string]string{"WORKERS": "20", "REQUEST_TIMEOUT": "2s", "RESCUE_STUCK_AFTER": "8s",
		"RETRY_SCHEDULE": "0s" + strings.Repeat(",10ms", 30)}
	dispatchers := []*Dispatcher{StartDispatcher(t, "dispatcher-1", db.URL, env), StartDispatcher(t, "dispatcher-2", db.URL, env)}
	start := time.Now()
	accepted := sendInOrder(t, api, 0, messages)

	<-o.hung
	// The head's job is running in the dispatcher whose request hangs:
	// River's attempted_by names its client.
	var client string
	Eventually(t, 10*time.Second, 10*time.Millisecond, "the hung head's job is running", func() bool {
		err := db.Pool.QueryRow(context.Background(), `SELECT attempted_by[array_upper(attempted_by, 1)] FROM river_job
			WHERE state = 'running' AND kind = 'deliver' AND args->>'endpoint_id' = $1`, ep.ID).Scan(&client)
		return err == nil
	})
	var victim *Dispatcher
	for _, d := range dispatchers {
		if m := riverClientRE.FindStringSubmatch(d.Output()); m != nil && m[1] == client {
			victim = d
		}
	}
	require.NotNil(t, victim, "a dispatcher runs client %s", client)
	victim.Kill()
	killedAt, killed := len(o.firstReceipts()), time.Now()
	require.Less(t, killedAt, messages, "the kill landed mid-run")

	Eventually(t, 3*time.Minute, 200*time.Millisecond, "every message delivered", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, ep.ID).Scan(&n))
		return n == messages
	})
	st := rc.Stats("/fifo")
	require.Equal(t, messages, st.DistinctDelivered, "every message received")
	require.Equal(t, accepted, o.firstReceipts(), "first successful receipts in acceptance order")
	require.Equal(t, 1, st.MaxInFlight, "one request at a time")
	require.Zero(t, st.BadSignatures)
	t.Logf("killed %s after %d first receipts, %.1f s in; all delivered %.1f s after the kill; %d requests for %d messages, %d duplicates",
		victim.Name, killedAt, killed.Sub(start).Seconds(), time.Since(killed).Seconds(), st.Requests, messages, st.Duplicates)
}

// fifoBreakerClass trips on three consecutive failures and probes after
// two seconds with one trial.
var fifoBreakerClass = map[string]any{
	"name": "fifo-fast", "trip": "consecutive", "consecutive_failures": 3,
	"open_duration": "2s", "half_open_trials": 1, "half_open_concurrency": 1,
}

// TestFIFOOrderBehindAnOpenBreaker: a FIFO endpoint's receiver fails
// every request until its breaker opens and parks the head; more messages
// arrive while it is open and wait behind it; the receiver recovers, the
// half-open probe is the head, and the queue goes on. The first
// successful receipts are in acceptance order, one request at a time.
func TestFIFOOrderBehindAnOpenBreaker(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	o := newOrderedReceiver(0, 1)
	o.down = true
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: o.respond})
	api := StartAPI(t, db.URL, nil)
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", fifoBreakerClass, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/fifo"), "secret": testSecret,
		"ordering": "fifo", "traffic_class": "fifo-fast"})
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{"WORKERS": "20", "REQUEST_TIMEOUT": "2s",
		"RETRY_SCHEDULE": "0s" + strings.Repeat(",100ms", 30)})
	accepted := sendInOrder(t, api, 0, 100)

	parkedHead := func() bool {
		var parked bool
		require.NoError(t, db.Pool.QueryRow(context.Background(), `
			SELECT EXISTS (SELECT 1 FROM deliveries WHERE endpoint_id = $1 AND status = 'waiting' AND job_id IS NULL AND park_reason IS NULL)`,
			ep.ID).Scan(&parked))
		return parked
	}
	Eventually(t, time.Minute, 20*time.Millisecond, "the open breaker parked the head", parkedHead)
	accepted = append(accepted, sendInOrder(t, api, 100, 100)...)
	var inLine int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'waiting' AND park_reason = 'fifo'`, ep.ID).Scan(&inLine))
	require.Equal(t, 199, inLine, "the rest wait behind the parked head")
	require.Empty(t, o.firstReceipts())
	o.mu.Lock()
	o.down = false
	o.mu.Unlock()

	Eventually(t, 2*time.Minute, 100*time.Millisecond, "every message delivered", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, ep.ID).Scan(&n))
		return n == len(accepted)
	})
	st := rc.Stats("/fifo")
	require.Equal(t, len(accepted), st.DistinctDelivered)
	require.Equal(t, accepted, o.firstReceipts(), "first successful receipts in acceptance order")
	require.Equal(t, 1, st.MaxInFlight, "one request at a time")
	var opens, closes int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE to_state = 'open'), count(*) FILTER (WHERE to_state = 'closed')
		FROM breaker_transitions WHERE endpoint_id = $1`, ep.ID).Scan(&opens, &closes))
	require.Positive(t, opens)
	require.Positive(t, closes)
	t.Logf("%d requests for %d messages; %d opens, %d closes", st.Requests, len(accepted), opens, closes)
}

// TestEndpointsOwnScheduleAndTimeout: two endpoints of one tenant with
// their own retry schedules and timeouts, and a receiver that never
// answers: each attempt ends at its endpoint's timeout (which its log
// records), each endpoint makes its own schedule's number of attempts,
// retried within its own delays, none at the dispatcher's.
func TestEndpointsOwnScheduleAndTimeout(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(*deliverytest.Request) deliverytest.Response {
		return deliverytest.Response{Hang: true}
	}})
	api := StartAPI(t, db.URL, nil)
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{"REQUEST_TIMEOUT": "5s", "RETRY_SCHEDULE": "0s,1m", "BREAKERS": "false"})
	type own struct {
		path     string
		timeout  time.Duration
		schedule []string
		steps    []time.Duration
	}
	ends := []own{
		{"/short", time.Second, []string{"0s", "1s", "1s"}, []time.Duration{time.Second, time.Second}},
		{"/long", 2 * time.Second, []string{"0s", "3s"}, []time.Duration{3 * time.Second}},
	}
	ids := make([]string, len(ends))
	for i, e := range ends {
		ids[i] = api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL(e.path), "secret": testSecret,
			"timeout": e.timeout.String(), "retry_schedule": e.schedule}).ID
	}
	m := api.SendMessage(t, "acme", "order.created", map[string]any{"n": 1})
	require.Len(t, m.Deliveries, 2)

	Eventually(t, time.Minute, 100*time.Millisecond, "both deliveries failed", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE message_id = $1 AND status = 'failed'`, m.ID).Scan(&n))
		return n == 2
	})
	type attempt struct {
		AttemptNumber int       `json:"attempt_number"`
		AttemptedAt   time.Time `json:"attempted_at"`
		DurationMS    float64   `json:"duration_ms"`
		ErrorClass    *string   `json:"error_class"`
		TimeoutMS     *int64    `json:"timeout_ms"`
	}
	for i, e := range ends {
		var list struct {
			Data []attempt `json:"data"`
		}
		code, err := api.Do(context.Background(), "GET", "/v1/endpoints/"+ids[i]+"/attempts", nil, &list)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.Len(t, list.Data, len(e.schedule), "%s: one attempt per entry of its schedule", e.path)
		as := list.Data
		for j := range as {
			a := as[len(as)-1-j] // oldest first
			require.Equal(t, j+1, a.AttemptNumber)
			require.Equal(t, "timeout", *a.ErrorClass, e.path)
			require.Equal(t, e.timeout.Milliseconds(), *a.TimeoutMS, "%s: the log records the timeout used", e.path)
			took := time.Duration(a.DurationMS * float64(time.Millisecond))
			require.GreaterOrEqual(t, took, e.timeout-50*time.Millisecond, "%s: the attempt lasted its timeout", e.path)
			require.Less(t, took, e.timeout+time.Second, "%s: and ended there", e.path)
			if j > 0 {
				prev := as[len(as)-j]
				gap := a.AttemptedAt.Sub(prev.AttemptedAt) - time.Duration(prev.DurationMS*float64(time.Millisecond))
				require.LessOrEqual(t, gap, e.steps[j-1]+time.Second, "%s: attempt %d within its own delay, not the dispatcher's minute", e.path, j+1)
			}
		}
	}
	require.Equal(t, 3, rc.Stats("/short").Requests)
	require.Equal(t, 2, rc.Stats("/long").Requests)
}
