package destination_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/netcut"
)

const rabbitAddr = "127.0.0.1:5672"

// rabbitNamespace declares an exchange and a bound queue of the test's
// own, deleted at its end, and returns a channel consuming the queue.
func rabbitNamespace(t *testing.T) (exchange, key string, deliveries <-chan amqp.Delivery) {
	t.Helper()
	requireRunning(t, "RabbitMQ", rabbitAddr)
	conn, err := amqp.Dial("amqp://guest:guest@" + rabbitAddr + "/")
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	exchange, key = unique(t), "hooks"
	require.NoError(t, ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil))
	q, err := ch.QueueDeclare(exchange, false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, key, exchange, false, nil))
	deliveries, err = ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(q.Name, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
		_ = conn.Close()
	})
	return exchange, key, deliveries
}

func TestRabbitMQPublishes(t *testing.T) {
	t.Parallel()
	exchange, key, deliveries := rabbitNamespace(t)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.RabbitMQConfig{URL: "amqp://" + rabbitAddr + "/", Exchange: exchange, RoutingKey: key, Username: "guest", Password: "guest"}
	require.NoError(t, cfg.Validate())

	const n = 200
	msgs := publishAll(t, pool, cfg, s, exchange, n)
	got := newConsumed(t, s, msgs)
	errs := make(chan error, 1)
	go func() {
		for d := range deliveries {
			h := map[string]string{}
			for k, v := range d.Headers {
				h[k], _ = v.(string)
			}
			if err := got.add(h, d.Body); err != nil {
				errs <- err
				return
			}
			if d.MessageId != h[destination.HeaderID] || d.DeliveryMode != amqp.Persistent {
				errs <- errMismatch(d.MessageId)
				return
			}
		}
	}()
	got.wait(errs)
}

type errMismatch string

func (e errMismatch) Error() string { return "message properties of " + string(e) }

func TestRabbitMQClassifiesFailures(t *testing.T) {
	t.Parallel()
	requireRunning(t, "RabbitMQ", rabbitAddr)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	m := s.message("fail", 0)

	t.Run("wrong credentials", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.RabbitMQConfig{URL: "amqp://" + rabbitAddr + "/", RoutingKey: "k", Username: "guest", Password: "wrong-" + unique(t)}
		// RabbitMQ answers a refused login after a delay of its own (3 s
		// here): an endpoint timeout shorter than that sees a timeout
		// first, and the refusal on its next attempt (lazyConn's sticky
		// refusal, tested on its own).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := pool.Publish(ctx, cfg, m)
		require.Equal(t, destination.AuthRefused, r.Outcome, "%v", r.Err)
		// The refusal is kept: the next publish is refused at once.
		r = publish(pool, cfg, m)
		require.Equal(t, destination.AuthRefused, r.Outcome, "%v", r.Err)
		require.Less(t, r.Duration, time.Second)
	})
	t.Run("missing exchange", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.RabbitMQConfig{URL: "amqp://" + rabbitAddr + "/", Exchange: unique(t), RoutingKey: "k", Username: "guest", Password: "guest"}
		requireRefused(t, publish(pool, cfg, m))
		// The broker closed the channel: the next publish opens another
		// and is refused the same way, not stuck.
		requireRefused(t, publish(pool, cfg, m))
	})
	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.RabbitMQConfig{URL: "amqp://" + closedAddr(t) + "/", RoutingKey: "k"}
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Unreachable)
	})
	t.Run("server never answers", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.RabbitMQConfig{URL: "amqp://" + silentAddr(t) + "/", RoutingKey: "k"}
		start := time.Now()
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Timeout)
		require.Less(t, time.Since(start), publishTimeout+slack)
	})
}

// TestRabbitMQPublishEndsAtItsDeadlineWhileTheBrokerReadsNothing:
// amqp091's publish writes with no deadline (its context is checked only
// before the write), so a broker that stops reading (as RabbitMQ does to
// a publisher under a resource alarm) would hold a publish past its
// attempt's deadline. Through a stalled proxy, a large publish must fail
// at its deadline, and the next publish dial anew.
func TestRabbitMQPublishEndsAtItsDeadlineWhileTheBrokerReadsNothing(t *testing.T) {
	t.Parallel()
	exchange, key, _ := rabbitNamespace(t)
	proxy, err := netcut.Start(rabbitAddr)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.RabbitMQConfig{URL: "amqp://" + proxy.Addr() + "/", Exchange: exchange, RoutingKey: key, Username: "guest", Password: "guest"}
	r := publish(pool, cfg, s.message("stall", 0))
	require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)

	proxy.Stall()
	big := s.message("stall", 1)
	big.Body = []byte(`"` + strings.Repeat("x", 24<<20) + `"`)
	requireFailedWithin(t, publishWithin(pool, cfg, big), destination.Timeout, destination.Unreachable)

	// The stuck connection is gone: resumed, the next publish dials anew
	// and is confirmed.
	proxy.Resume()
	r = publish(pool, cfg, s.message("stall", 2))
	require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)
}
