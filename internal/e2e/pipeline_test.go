package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type pipeline struct {
	db       *storetest.DB
	api      *API
	receiver *deliverytest.Receiver
}

func setupPipeline(t *testing.T, respond func(*deliverytest.Request) deliverytest.Response) *pipeline {
	t.Helper()
	db := storetest.New(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: respond})
	return &pipeline{db: db, api: StartAPI(t, db.URL, nil), receiver: rc}
}

func (p *pipeline) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, p.db.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// TestFanOutDeliversEveryMessageOnce is the pipeline's main end-to-end
// check: 1,000 messages fanned out to 3 endpoints through real
// api and dispatcher processes; every one of the 3,000 deliveries arrives
// once with a valid signature and every attempt is logged.
func TestFanOutDeliversEveryMessageOnce(t *testing.T) {
	t.Parallel()
	p := setupPipeline(t, nil)
	StartDispatcher(t, "dispatcher", p.db.URL, map[string]string{"WORKERS": "50"})
	paths := []string{"/a", "/b", "/c"}
	for _, path := range paths {
		p.api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": p.receiver.URL(path), "secret": testSecret})
	}
	// Another tenant's endpoint must never see acme's messages.
	p.api.CreateEndpoint(t, map[string]any{"tenant_id": "globex", "url": p.receiver.URL("/globex"), "secret": testSecret})

	const messages = 1000
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < messages; i += 8 {
				m := p.api.SendMessage(t, "acme", "invoice.paid", map[string]any{"n": i, "note": strings.Repeat("x", 100)})
				if len(m.Deliveries) != 3 {
					t.Errorf("message %d: %d deliveries", i, len(m.Deliveries))
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, messages, sent.Load())

	Eventually(t, 2*time.Minute, 200*time.Millisecond, "3,000 deliveries delivered", func() bool {
		return p.count(t, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`) == 3*messages
	})
	for _, path := range paths {
		st := p.receiver.Stats(path)
		require.Equal(t, messages, st.DistinctDelivered, path)
		require.Zero(t, st.Duplicates, path)
		require.Zero(t, st.BadSignatures, path)
	}
	require.Zero(t, p.receiver.Stats("/globex").Requests, "tenant isolation")
	require.Equal(t, 3*messages, p.count(t, `SELECT count(*) FROM delivery_attempts WHERE classification = 'success'`))
	require.Equal(t, 3*messages, p.count(t, `SELECT count(*) FROM delivery_attempts`), "every attempt logged, none extra")
}

// TestFailingReceiverGetsTheDeliveryOnAttemptThree: 500, 500, then 200.
func TestFailingReceiverGetsTheDeliveryOnAttemptThree(t *testing.T) {
	t.Parallel()
	p := setupPipeline(t, func(r *deliverytest.Request) deliverytest.Response {
		if r.Seq <= 2 {
			return deliverytest.Response{Status: http.StatusInternalServerError, Body: []byte("try later")}
		}
		return deliverytest.Response{Status: http.StatusOK}
	})
	StartDispatcher(t, "dispatcher", p.db.URL, map[string]string{"RETRY_SCHEDULE": "0s,50ms,50ms,50ms"})
	e := p.api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": p.receiver.URL("/flaky"), "secret": testSecret})
	m := p.api.SendMessage(t, "acme", "invoice.paid", map[string]any{"id": 1})

	var d Delivery
	Eventually(t, 30*time.Second, 50*time.Millisecond, "delivery delivered", func() bool {
		_, err := p.api.Do(context.Background(), "GET", "/v1/deliveries/"+m.Deliveries[0].ID, nil, &d)
		return err == nil && d.Status == "delivered"
	})
	require.Equal(t, 3, d.AttemptCount)
	var attempts struct {
		Data []struct {
			AttemptNumber  int    `json:"attempt_number"`
			StatusCode     int    `json:"status_code"`
			Classification string `json:"classification"`
		} `json:"data"`
	}
	code, err := p.api.Do(context.Background(), "GET", "/v1/endpoints/"+e.ID+"/attempts", nil, &attempts)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, attempts.Data, 3)
	for i, want := range []struct {
		n, status int
		class     string
	}{{3, 200, "success"}, {2, 500, "failure"}, {1, 500, "failure"}} {
		require.Equal(t, want.n, attempts.Data[i].AttemptNumber)
		require.Equal(t, want.status, attempts.Data[i].StatusCode)
		require.Equal(t, want.class, attempts.Data[i].Classification)
	}
	st := p.receiver.Stats("/flaky")
	require.Equal(t, 3, st.Requests)
	require.Equal(t, 1, st.Delivered)
}

// TestKilledDispatcherLosesNothing kills the dispatcher with SIGKILL in the
// middle of a run and starts another: every delivery still arrives, and a
// webhook arrives twice only where the kill interrupted its attempt.
func TestKilledDispatcherLosesNothing(t *testing.T) {
	t.Parallel()
	// The messages are queued before the dispatcher starts, and after its
	// first 100 requests the receiver answers nothing until the kill: the
	// kill lands mid-run with attempts in flight however fast or slow the
	// machine is. Should the kill come late, an attempt that timed out
	// waiting is retried within a second.
	const answerFirst = 100
	var requests atomic.Int64
	var killed atomic.Bool
	p := setupPipeline(t, func(r *deliverytest.Request) deliverytest.Response {
		if !killed.Load() && requests.Add(1) > answerFirst {
			return deliverytest.Response{Hang: true}
		}
		return deliverytest.Response{Status: http.StatusOK, Delay: 20 * time.Millisecond}
	})
	env := map[string]string{"WORKERS": "20", "REQUEST_TIMEOUT": "2s", "RESCUE_STUCK_AFTER": "8s",
		"RETRY_SCHEDULE": "0s" + strings.Repeat(",1s", 30)}
	p.api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": p.receiver.URL("/k"), "secret": testSecret})
	const messages = 600
	for i := range messages {
		p.api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	first := StartDispatcher(t, "dispatcher-1", p.db.URL, env)
	Eventually(t, time.Minute, 10*time.Millisecond, "deliveries made, then attempts in flight", func() bool {
		st := p.receiver.Stats("/k")
		return requests.Load() > answerFirst && st.InFlight > 0
	})
	first.Kill()
	killed.Store(true)
	// The dead process's requests end as the receiver sees their
	// connections close; one whose 20 ms delay ran out first is answered
	// then, on a loaded machine after the kill. The answers are counted
	// once none is left in flight (nothing else sends until dispatcher-2
	// starts).
	Eventually(t, 30*time.Second, 10*time.Millisecond, "the killed process's requests end", func() bool {
		return p.receiver.Stats("/k").InFlight == 0
	})
	killedAt := p.receiver.Stats("/k").Delivered
	require.Less(t, killedAt, messages, "the kill landed mid-run")
	// The answers the receiver gave that the dead process's ledger had not
	// committed: a job gives back its request's worker when the answer is
	// in and waits for the ledger, so on a loaded machine they can be more
	// than the workers (up to the jobs running). Read after the kill, a
	// commit already on its way may land after the read: the bound is
	// then looser, never tighter.
	uncommitted := killedAt - p.count(t, `SELECT count(*) FROM delivery_attempts WHERE classification = 'success'`)
	StartDispatcher(t, "dispatcher-2", p.db.URL, env)

	Eventually(t, 3*time.Minute, 200*time.Millisecond, "every delivery delivered after the restart", func() bool {
		return p.count(t, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`) == messages
	})
	st := p.receiver.Stats("/k")
	require.Equal(t, messages, st.DistinctDelivered, "nothing lost")
	require.Zero(t, st.BadSignatures)
	// Duplicates only where the kill cut an attempt between the receiver's
	// answer and the ledger's commit, each sent again once at most.
	require.LessOrEqual(t, st.Duplicates, uncommitted, "duplicates: %d, answers not committed at the kill: %d", st.Duplicates, uncommitted)
	// A duplicate is the resend of an attempt the kill cut before its log
	// row committed; every other successful attempt is logged exactly once.
	require.Equal(t, messages, p.count(t, `SELECT count(*) FROM delivery_attempts WHERE classification = 'success'`))
	require.Equal(t, messages+st.Duplicates, st.Delivered)
	t.Logf("killed after %d deliveries (%d not committed); duplicates after restart: %d", killedAt, uncommitted, st.Duplicates)
}

// TestKilledDispatcherMidFanOut kills the dispatcher with SIGKILL while its
// message jobs are mid-fan-out: each message's deliveries to the fast
// endpoints delivered and recorded, the one to the slow endpoint still
// waiting for its answer. The restarted fleet reruns the message jobs;
// nothing is lost, the fast endpoints get nothing twice, and the slow one
// gets each message once it answers.
func TestKilledDispatcherMidFanOut(t *testing.T) {
	t.Parallel()
	var killed atomic.Bool
	p := setupPipeline(t, func(r *deliverytest.Request) deliverytest.Response {
		if r.Path == "/slow" && !killed.Load() {
			return deliverytest.Response{Hang: true}
		}
		return deliverytest.Response{Status: http.StatusOK}
	})
	// Every message job starts at once (WORKERS, MAX_PER_ENDPOINT) and
	// holds its slow attempt for the request timeout, long enough for the
	// kill to land before any of them times out on a busy machine.
	const messages = 10
	// The default retry schedule: a rerun must not spend the deliveries'.
	// River's own rescue stays at its default (past the longest endpoint
	// timeout, over a minute): the fleet's heartbeat finds the killed
	// dispatcher gone within seconds and makes its jobs available.
	const requestTimeout = 10 * time.Second
	env := map[string]string{"WORKERS": "20", "MAX_PER_ENDPOINT": "20", "REQUEST_TIMEOUT": requestTimeout.String()}
	fast := []string{"/f1", "/f2", "/f3", "/f4"}
	for _, path := range append([]string{"/slow"}, fast...) {
		p.api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": p.receiver.URL(path), "secret": testSecret})
	}
	for i := range messages {
		m := p.api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
		require.Len(t, m.Deliveries, 5)
	}
	require.Equal(t, messages, p.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver_message'`),
		"one job per message")
	require.Zero(t, p.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver'`))

	first := StartDispatcher(t, "dispatcher-1", p.db.URL, env)
	Eventually(t, time.Minute, 10*time.Millisecond, "the fast deliveries recorded, the slow ones in flight", func() bool {
		return p.count(t, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`) == len(fast)*messages &&
			p.receiver.Stats("/slow").InFlight == messages
	})
	require.Equal(t, messages, p.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver_message' AND state = 'running'`),
		"the kill lands mid-fan-out")
	first.Kill()
	killedAt := time.Now()
	killed.Store(true)
	StartDispatcher(t, "dispatcher-2", p.db.URL, env)

	Eventually(t, 3*time.Minute, 200*time.Millisecond, "every delivery delivered after the restart", func() bool {
		return p.count(t, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`) == 5*messages
	})
	recovered := time.Since(killedAt)
	t.Logf("every delivery of the killed dispatcher delivered %s after the kill", recovered.Round(100*time.Millisecond))
	require.Less(t, recovered, 30*time.Second+requestTimeout, "recovered within 30 s of the kill plus an attempt's timeout")
	for _, path := range append([]string{"/slow"}, fast...) {
		st := p.receiver.Stats(path)
		require.Equal(t, messages, st.DistinctDelivered, path)
		require.Zero(t, st.Duplicates, path)
		require.Zero(t, st.BadSignatures, path)
	}
	for _, path := range fast {
		require.Equal(t, messages, p.receiver.Stats(path).Requests, "%s: the rerun sent nothing the ledger had settled", path)
	}
	// The rerun made the slow attempts as each delivery's first recorded
	// one (the attempt cut with its process left no record): attempt 1,
	// whatever the job's run.
	require.Equal(t, 5*messages, p.count(t, `SELECT count(*) FROM delivery_attempts`))
	require.Equal(t, 5*messages, p.count(t, `SELECT count(*) FROM delivery_attempts WHERE attempt_number = 1`))
	require.Equal(t, 5*messages, p.count(t, `SELECT count(*) FROM deliveries WHERE attempt_count = 1`))
	Eventually(t, time.Minute, 100*time.Millisecond, "every message job completed on its second run", func() bool {
		return p.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver_message' AND state = 'completed' AND attempt = 2`) == messages
	})
}
