package dispatcher_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// waitFor bounds every wait on an event; generous, for a busy machine.
const waitFor = time.Minute

var metricsLine = regexp.MustCompile(`^dispatcher metrics on (http://\S+)/metrics$`)

// TestRunDeliversThenStopsEveryGoroutine runs a Dispatcher, with breakers
// on and off, against a fresh database and a receiver on 127.0.0.1: a
// message is delivered, the metrics server answers, and once ctx is
// cancelled Run returns nil with the delivery recorded and every goroutine
// it started gone.
//
// Not parallel, here and in every test that runs a Dispatcher: goleak
// compares against the goroutines alive when the dispatcher starts, so no
// other test may start any meanwhile.
func TestRunDeliversThenStopsEveryGoroutine(t *testing.T) {
	for _, breakers := range []bool{true, false} {
		t.Run(fmt.Sprintf("breakers=%v", breakers), func(t *testing.T) {
			runAndStop(t, breakers)
		})
	}
}

func runAndStop(t *testing.T, breakers bool) {
	db := storetest.New(t)
	arrived := make(chan string, 1)
	secret := newSecret(t)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{secret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		select {
		case arrived <- r.MsgID:
		default:
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	st := store.New(db.Pool, nil)
	ep, err := st.CreateEndpoint(t.Context(), store.Endpoint{TenantID: "acme", URL: rc.URL("/hook"), Secret: secret})
	require.NoError(t, err)
	// An insert-only River client: it starts no goroutine.
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	before := goleak.IgnoreCurrent()
	// The run has a pool of its own, closed before the goroutine check: a
	// connection it opened in a shared pool would outlive it (a pgx
	// connection's background reader among them).
	pool, err := pgxpool.New(t.Context(), db.URL)
	require.NoError(t, err)

	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.AllowPrivateTargets = true
	cfg.ShutdownGrace = 10 * time.Second
	cfg.Breakers = breakers
	base, cancel, done := startRun(t, cfg, pool, slog.LevelWarn)
	defer cancel()
	for path, want := range map[string]string{"/healthz": `{"status":"ok"}`, "/readyz": `{"status":"ready"}`} {
		res, err := http.Get(base + path)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, res.Body.Close())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.JSONEq(t, want, string(body), path)
	}
	http.DefaultClient.CloseIdleConnections()

	msg, created, err := st.CreateMessage(t.Context(), store.NewMessage{TenantID: "acme", EventType: "order.created", Payload: json.RawMessage(`{"n":1}`)}, &delivery.Enqueuer{Client: inserter})
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, msg.Deliveries, 1)
	require.Equal(t, ep.ID, msg.Deliveries[0].EndpointID)
	select {
	case id := <-arrived:
		require.Equal(t, msg.ID, id, "the webhook-id is the message id")
	case err := <-done:
		t.Fatalf("Run returned before delivering: %v", err)
	case <-time.After(waitFor):
		t.Fatal("the message never arrived")
	}

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(cfg.ShutdownGrace + waitFor):
		t.Fatal("Run did not return after ctx was cancelled")
	}
	// The answered attempt was recorded before Run returned: shutdown
	// flushes the ledger after River's last job.
	got, err := st.GetDelivery(context.Background(), msg.Deliveries[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, got.Status)
	require.Equal(t, 1, got.AttemptCount)
	_, err = http.Get(base + "/healthz")
	require.Error(t, err, "the metrics server is closed")
	pool.Close()
	goleak.VerifyNone(t, before)
}

// TestRunFailingToStartLeavesNothing: when Run cannot start (the metrics
// address is taken) it says why and leaves no goroutine behind, the trial
// pool's included.
func TestRunFailingToStartLeavesNothing(t *testing.T) {
	db := storetest.New(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	before := goleak.IgnoreCurrent()
	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = taken.Addr().String()
	d, err := dispatcher.New(cfg, dispatcher.Deps{Pool: db.Pool})
	require.NoError(t, err)
	err = d.Run(t.Context())
	require.ErrorContains(t, err, "listen for metrics: ")
	require.ErrorContains(t, err, "address already in use")
	goleak.VerifyNone(t, before)
}

func TestRunTwiceIsRefused(t *testing.T) {
	db := storetest.New(t)
	cfg := dispatcher.DefaultConfig()
	cfg.MetricsAddr = "127.0.0.1:0"
	d, err := dispatcher.New(cfg, dispatcher.Deps{Pool: db.Pool})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// A Run whose ctx has ended stops at once, and a Dispatcher runs once.
	require.NoError(t, d.Run(ctx))
	require.EqualError(t, d.Run(t.Context()), "dispatcher: Run called twice")
}

func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return delivery.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// startRun runs a Dispatcher of cfg on pool until the returned cancel is
// called, and returns the base URL of its metrics listener once it prints
// it; done receives Run's result.
func startRun(t *testing.T, cfg dispatcher.Config, pool *pgxpool.Pool, level slog.Level) (base string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	return startRunWith(t, cfg, dispatcher.Deps{Pool: pool}, level)
}

// startRunWith is startRun with deps (their Logger and Stdout are set here).
func startRunWith(t *testing.T, cfg dispatcher.Config, deps dispatcher.Deps, level slog.Level) (base string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	stdout, lines := io.Pipe()
	deps.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
	deps.Stdout = lines
	d, err := dispatcher.New(cfg, deps)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	result := make(chan error, 1)
	go func() {
		result <- d.Run(ctx)
		_ = lines.Close()
	}()
	metricsURL := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := metricsLine.FindStringSubmatch(sc.Text()); m != nil {
				metricsURL <- m[1]
			}
		}
	}()
	select {
	case base = <-metricsURL:
	case err := <-result:
		cancel()
		t.Fatalf("Run returned before serving metrics: %v", err)
	case <-time.After(waitFor):
		cancel()
		t.Fatal("no metrics URL printed")
	}
	return base, cancel, result
}

// metricLine returns a check that the metrics served at base hold a line
// starting with want (a literal).
func metricLine(t *testing.T, base, want string) func() bool {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want))
	return func() bool {
		res, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, res.Body.Close())
		require.NoError(t, err)
		return re.Match(body)
	}
}
