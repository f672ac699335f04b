package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// downReceiver answers 500 while down; once up it answers 200 after a
// little work, counting the requests it holds at once.
type downReceiver struct {
	mu          sync.Mutex
	up          bool
	inFlight    int
	maxInFlight int // while up
}

func (d *downReceiver) respond(*deliverytest.Request) deliverytest.Response {
	d.mu.Lock()
	up := d.up
	if up {
		d.inFlight++
		d.maxInFlight = max(d.maxInFlight, d.inFlight)
	}
	d.mu.Unlock()
	if !up {
		return deliverytest.Response{Status: http.StatusInternalServerError}
	}
	// The work happens inside the in-flight count (a Response's Delay is
	// served after Respond returns).
	time.Sleep(20 * time.Millisecond) // the receiver's work, not synchronisation
	d.mu.Lock()
	d.inFlight--
	d.mu.Unlock()
	return deliverytest.Response{Status: http.StatusOK}
}

func (d *downReceiver) setUp() {
	d.mu.Lock()
	d.up = true
	d.mu.Unlock()
}

func (d *downReceiver) most() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.maxInFlight
}

var unparkedRE = regexp.MustCompile(`msg=deliveries_unparked endpoint=(\S+) released=(\d+)`)

// TestRecoverSendsAnOutagesFailuresOnceAtAPace: 200 deliveries fail while
// their receiver is down (a short retry schedule exhausts them; a shadow
// class keeps the breaker from parking them). Once the receiver is back,
// one recovery delivers every one exactly once, released by the unparker
// a few at a time (its first release is its starting window), never more
// at once at the receiver than the per-endpoint cap; a second recovery
// while the first is releasing answers 409.
func TestRecoverSendsAnOutagesFailuresOnceAtAPace(t *testing.T) {
	t.Parallel()
	const (
		messages = 200
		perEP    = 5
	)
	db := storetest.New(t)
	rcv := &downReceiver{}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: rcv.respond})
	api := StartAPI(t, db.URL, nil)
	shadow := map[string]any{}
	for k, v := range fastClass {
		shadow[k] = v
	}
	shadow["name"], shadow["enforce"] = "shadowfast", false
	code, err := api.Do(context.Background(), "POST", "/v1/traffic-classes", shadow, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	disp := StartDispatcher(t, "dispatcher", db.URL, map[string]string{"WORKERS": "30", "RETRY_SCHEDULE": "0s,100ms",
		"MAX_PER_ENDPOINT": strconv.Itoa(perEP)})
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/down"), "secret": testSecret, "traffic_class": "shadowfast"})

	since := time.Now().Add(-time.Minute).UTC()
	for i := range messages {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	count := func(status string) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = $2`, ep.ID, status).Scan(&n))
		return n
	}
	Eventually(t, 45*time.Second, 100*time.Millisecond, "every delivery failed", func() bool { return count("failed") == messages })
	require.Zero(t, rc.Stats("/down").Delivered)
	rcv.setUp()

	path := "/v1/endpoints/" + ep.ID + "/recover"
	var rec struct {
		Queued         int `json:"queued"`
		PayloadExpired int `json:"payload_expired"`
	}
	code, err = api.Do(context.Background(), "POST", path, map[string]any{"since": since.Format(time.RFC3339Nano)}, &rec)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, messages, rec.Queued)
	require.Zero(t, rec.PayloadExpired)
	// The unparker releases 200 over several passes of 200 ms: the first
	// recovery is still releasing.
	code, err = api.Do(context.Background(), "POST", path, map[string]any{"since": since.Format(time.RFC3339Nano)}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, code, "a recovery while one is releasing")

	Eventually(t, 45*time.Second, 100*time.Millisecond, "every recovered delivery delivered", func() bool { return count("delivered") == messages })
	st := rc.Stats("/down")
	require.Equal(t, messages, st.DistinctDelivered, "every webhook-id reached the receiver")
	require.Zero(t, st.Duplicates, "none twice")
	require.LessOrEqual(t, rcv.most(), perEP, "never more at once than the per-endpoint cap")
	var series2 int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries
		WHERE endpoint_id = $1 AND series = 2 AND series_base = 2 AND attempt_count = 3`, ep.ID).Scan(&series2))
	require.Equal(t, messages, series2, "a new series, numbered after the two failed attempts")

	var releases []int
	for _, line := range disp.Lines("msg=deliveries_unparked") {
		if m := unparkedRE.FindStringSubmatch(line); m != nil && m[1] == ep.ID {
			n, _ := strconv.Atoi(m[2])
			releases = append(releases, n)
		}
	}
	require.Greater(t, len(releases), 1, "released over several passes, not at once: %v", releases)
	require.LessOrEqual(t, releases[0], 4, "the first release is the unparker's starting window: %v", releases)
	t.Logf("released in %d passes %v; at most %d at once at the receiver", len(releases), releases, rcv.most())
}
