package destination_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

const natsAddr = "127.0.0.1:4222"

// natsStream creates a stream of the test's own on the server at url,
// capturing subject, deleted at the test's end.
func natsStream(t *testing.T, url, user, pass, subject string) jetstream.Stream {
	t.Helper()
	var opts []nats.Option
	if user != "" {
		opts = append(opts, nats.UserInfo(user, pass))
	}
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name := unique(t)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
		nc.Close()
	})
	return st
}

func TestNATSPublishes(t *testing.T) {
	t.Parallel()
	requireRunning(t, "NATS", natsAddr)
	ns := unique(t)
	subject := ns + ".events"
	st := natsStream(t, "nats://"+natsAddr, "", "", subject)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.NATSConfig{URL: "nats://" + natsAddr, Subject: subject}
	require.NoError(t, cfg.Validate())

	const n = 200
	msgs := publishAll(t, pool, cfg, s, ns, n)
	// A retry of a delivery whose ack was lost is deduplicated by the
	// stream (the delivery id is the JetStream message id).
	for _, m := range msgs {
		r := publish(pool, cfg, m)
		require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)
		break
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	got := newConsumed(t, s, msgs)
	for len(got.seen) < n {
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		k := 0
		for msg := range batch.Messages() {
			k++
			h := map[string]string{}
			for key := range msg.Headers() {
				h[key] = msg.Headers().Get(key)
			}
			require.NoError(t, got.add(h, msg.Data()))
		}
		require.NoError(t, batch.Error())
		require.NotZero(t, k, "no more messages: %d of %d", len(got.seen), n)
	}
	got.wait(nil)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(n), info.State.Msgs, "the repeated publish was deduplicated")
}

// TestNATSOwnServer runs a NATS server of the test's own, with
// credentials, to check refused credentials and a server stopped.
func TestNATSOwnServer(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	srv := startProcess(t, "Server is ready", "nats-server", "-a", "127.0.0.1", "-p", fmt.Sprint(port),
		"-js", "-sd", t.TempDir(), "--user", "hookd", "--pass", "right")
	subject := unique(t) + ".events"
	natsStream(t, url, "hookd", "right", subject)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	m := s.message("own", 0)

	wrong := &destination.NATSConfig{URL: url, Subject: subject, Username: "hookd", Password: "wrong"}
	r := publish(pool, wrong, m)
	require.Equal(t, destination.AuthRefused, r.Outcome, "%v", r.Err)

	right := &destination.NATSConfig{URL: url, Subject: subject, Username: "hookd", Password: "right"}
	r = publish(pool, right, m)
	require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)

	nostream := &destination.NATSConfig{URL: url, Subject: unique(t), Username: "hookd", Password: "right"}
	requireRefused(t, publish(pool, nostream, m))

	stopProcess(t, srv)
	requireFailedWithin(t, publishWithin(pool, right, s.message("own", 1)), destination.Unreachable, destination.Timeout)
	requireFailedWithin(t, publishWithin(pool, right, s.message("own", 2)), destination.Unreachable, destination.Timeout)
}

func TestNATSClassifiesFailures(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	m := s.message("fail", 0)
	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.NATSConfig{URL: "nats://" + closedAddr(t), Subject: "s"}
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Unreachable)
	})
	t.Run("server never answers", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.NATSConfig{URL: "nats://" + silentAddr(t), Subject: "s"}
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Timeout)
	})
}
