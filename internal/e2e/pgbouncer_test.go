package e2e

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// pooledClass trips on three consecutive failures and opens for 2 s: the
// test's message rate is too low for a rate window.
var pooledClass = map[string]any{
	"name": "pooled", "trip": "consecutive", "consecutive_failures": 3, "window": "2s", "min_throughput": 20,
	"failure_rate_threshold": 0.5, "open_duration": "2s", "max_open_duration": "3s", "open_backoff": 1.5,
	"half_open_trials": 2, "half_open_concurrency": 1,
}

// sickReceiver answers 500 on /sick while failing, 200 elsewhere, and
// records when each /sick request arrived.
type sickReceiver struct {
	failing atomic.Bool
	mu      sync.Mutex
	sick    []time.Time
}

func (s *sickReceiver) respond(r *deliverytest.Request) deliverytest.Response {
	if r.Path != "/sick" {
		return deliverytest.Response{Status: http.StatusOK, Delay: 5 * time.Millisecond}
	}
	s.mu.Lock()
	s.sick = append(s.sick, time.Now())
	s.mu.Unlock()
	if s.failing.Load() {
		return deliverytest.Response{Status: http.StatusInternalServerError, Delay: 5 * time.Millisecond}
	}
	return deliverytest.Response{Status: http.StatusOK, Delay: 5 * time.Millisecond}
}

// TestFleetBehindPgBouncer: an api and two dispatchers whose DATABASE_URL
// goes through PgBouncer in transaction mode (DB_POOLED, three server
// connections shared by their pooled connections), what needs a
// session on DIRECT_DATABASE_URL (the api migrates the empty database
// through it), the role's settings given as docs/scaling.md says. Every
// message is delivered once to each endpoint; an endpoint that fails
// opens its breaker, which both dispatchers see, its deliveries are
// parked and nothing reaches it while open; once it recovers the breaker
// goes half-open and closes. Session advisory locks (tuning) live on
// direct connections only. No process logs a prepared statement or
// startup parameter error, nor the missing role settings.
func TestFleetBehindPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := StartCluster(t)
	admin, err := pgx.Connect(ctx, pg.AdminURL())
	require.NoError(t, err)
	for _, q := range []string{
		`CREATE DATABASE hookd`,
		// What pgx sends as startup parameters without a pooler.
		`ALTER ROLE postgres IN DATABASE hookd SET jit = off`,
		`ALTER ROLE postgres IN DATABASE hookd SET idle_in_transaction_session_timeout = '15s'`,
	} {
		_, err := admin.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	require.NoError(t, admin.Close(ctx))
	const serverConns = 3
	bouncer := StartPgBouncer(t, pg, "hookd", serverConns)
	direct := pg.URL("hookd")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- postgres log (last 30 lines) ---\n%s", lastLines(pg.Log(), 30))
		}
	})

	rc := &sickReceiver{}
	rc.failing.Store(true)
	recv := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: rc.respond})
	pooled := map[string]string{"DB_POOLED": "true", "DIRECT_DATABASE_URL": direct}
	api := StartAPI(t, bouncer.URL(), pooled) // migrates through the direct URL
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", pooledClass, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	env := map[string]string{
		"WORKERS": "20", "REQUEST_TIMEOUT": "2s", "BREAKER_FLEET_SUSPECT_SHARE": "0",
		// The tuning leader looks for queued passes every 3 s.
		"TUNE_SHADOW":    "30s",
		"RETRY_SCHEDULE": "0s,500ms,1s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s,2s",
	}
	for k, v := range pooled {
		env[k] = v
	}
	ds := StartDispatchers(t, bouncer.URL(), env, "dispatcher-1", "dispatcher-2")
	paths := []string{"/a", "/b", "/sick"}
	var sick Endpoint
	for _, p := range paths {
		e := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": recv.URL(p), "secret": testSecret, "traffic_class": "pooled"})
		if p == "/sick" {
			sick = e
		}
	}

	// The checks read PostgreSQL directly.
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: direct, MaxConns: 2, ApplicationName: "e2e"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := &storetest.DB{Name: "hookd", URL: direct, Pool: pool}
	count := func(q string, args ...any) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q, args...).Scan(&n), q)
		return n
	}
	breakerState := func() string {
		var b struct {
			State string `json:"state"`
		}
		code, err := api.Do(ctx, "GET", "/v1/endpoints/"+sick.ID+"/breaker", nil, &b)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		return b.State
	}

	// 10 messages a second to the three endpoints until told to stop.
	var sent atomic.Int64
	var sendErr atomic.Value
	stop := make(chan struct{})
	sending := make(chan struct{})
	go func() {
		defer close(sending)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			code, err := api.Do(ctx, "POST", "/v1/messages", map[string]any{"tenant_id": "acme", "event_type": "order.created", "payload": map[string]any{"n": sent.Load()}}, nil)
			if err != nil || code != http.StatusAccepted {
				sendErr.Store(err)
				if err == nil {
					sendErr.Store(http.StatusText(code))
				}
				return
			}
			sent.Add(1)
		}
	}()
	stopSending := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-sending
	}
	t.Cleanup(stopSending)

	// The breaker opens, both dispatchers hold it open (each heard of it
	// through its LISTEN connection on the direct URL), and deliveries to
	// it are parked rather than sent.
	Eventually(t, 30*time.Second, 50*time.Millisecond, "the sick endpoint's breaker open on both dispatchers", func() bool {
		for _, d := range ds {
			if metricValue(t, d.MetricsURL, `breaker_state{endpoint="`+sick.ID+`",state="open"}`) != 1 {
				return false
			}
		}
		return true
	})
	Eventually(t, 20*time.Second, 100*time.Millisecond, "deliveries to the open breaker parked", func() bool {
		return count(`SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'waiting' AND breaker_open_until IS NOT NULL`, sick.ID) > 0
	})
	// The pooler's few server connections serve every pooled client.
	bp := bouncer.Pool(t)
	t.Logf("pgbouncer pool under load: %+v", bp)
	require.Equal(t, "transaction", bp.Mode)
	require.LessOrEqual(t, bp.Servers(), serverConns)
	require.Greater(t, bp.ClientsActive+bp.ClientsWaiting, serverConns, "more pooled clients than server connections")

	// It recovers: half-open, then closed.
	rc.failing.Store(false)
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the breaker closed after recovery", func() bool { return breakerState() == "closed" })
	stopSending()
	require.Nil(t, sendErr.Load(), "every message accepted")
	n := int(sent.Load())
	require.Positive(t, n)

	Eventually(t, 40*time.Second, 200*time.Millisecond, "every delivery delivered", func() bool {
		return count(`SELECT count(*) FROM deliveries WHERE status = 'delivered'`) == len(paths)*n
	})
	for _, p := range paths {
		st := recv.Stats(p)
		require.Equal(t, n, st.DistinctDelivered, "%s: every message delivered", p)
		require.Zero(t, st.Duplicates, "%s: each once", p)
	}
	require.Equal(t, 2, count(`SELECT count(DISTINCT attempted_by[array_upper(attempted_by, 1)]) FROM river_job WHERE state = 'completed'`),
		"both dispatchers worked jobs")

	// The breaker's history: it opened, went half-open, closed; nothing
	// reached the endpoint while it was open (past a straggle for the
	// requests admitted just before).
	spans, halfOpens := nonClosedSpans(t, db, sick.ID)
	require.NotEmpty(t, spans, "the breaker opened")
	require.Equal(t, "open", spans[0].state)
	require.Positive(t, halfOpens, "it went half-open")
	require.Equal(t, "closed", breakerState())
	rc.mu.Lock()
	arrivals := append([]time.Time(nil), rc.sick...)
	rc.mu.Unlock()
	const straggle = time.Second
	for _, sp := range spans {
		if sp.state != "open" {
			continue
		}
		for _, at := range arrivals {
			require.False(t, at.After(sp.from.Add(straggle)) && at.Before(sp.to), "a request at %s while open from %s to %s", at, sp.from, sp.to)
		}
	}
	var rejected float64
	for _, d := range ds {
		rejected += metricValue(t, d.MetricsURL, `breaker_rejected_total{endpoint="`+sick.ID+`"}`)
	}
	require.Positive(t, rejected, "the open breaker refused deliveries")

	// Session advisory locks live on direct connections: a tuning pass
	// asked of the api is queued for the dispatchers' tuning leader, which
	// runs it holding its class's lock, and every advisory lock held (the
	// leader's among them) is held by a session of the locks' own pool,
	// never by a server connection of the pooler's.
	for range 2 {
		code, err := api.Do(ctx, "POST", "/v1/traffic-classes/pooled/tune", map[string]any{}, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, code, "a tuning pass is queued")
		Eventually(t, 2*time.Minute, 100*time.Millisecond, "the queued pass done by the tuning leader", func() bool {
			var st struct {
				Status string `json:"status"`
			}
			code, err := api.Do(ctx, "GET", "/v1/traffic-classes/pooled/tune", nil, &st)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code)
			require.NotEqual(t, "failed", st.Status)
			return st.Status == "done"
		})
	}
	require.Zero(t, count(`SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND a.application_name NOT LIKE 'hookd-locks/%'`),
		"no advisory lock on a pooled connection")
	require.Positive(t, count(`SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND a.application_name LIKE 'hookd-locks/%'`), "the tuning leader's lock is held on a direct session")

	// Behind the pooler a dispatcher registers only its direct
	// connections against max_connections.
	want := dispatcher.LedgerConns + 1 + store.SessionPoolConns
	require.Equal(t, 2, count(`SELECT count(*) FROM hookd_dispatchers WHERE db_connections = $1`, want))

	// Nothing failed for want of a session, a statement or a parameter,
	// nor waited past the pooler's patience: prepared statements that do
	// not exist (26000) or already do (42P05), a protocol violation
	// (08P01), a refused startup parameter, missing role settings.
	for _, p := range []*Proc{api.Proc, ds[0].Proc, ds[1].Proc, bouncer.Proc} {
		for _, bad := range []string{"prepared statement", "SQLSTATE 26000", "SQLSTATE 42P05", "SQLSTATE 08P01", "unsupported startup parameter",
			"query_wait_timeout", "pooler error", "msg=role_settings"} {
			require.Empty(t, p.Lines(bad), "%s logged %q", p.Name, bad)
		}
	}
	require.NotContains(t, pg.Log(), "prepared statement")
}
