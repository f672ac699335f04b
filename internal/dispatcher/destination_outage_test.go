package dispatcher_test

import (
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

// collector gathers what a consumer goroutine receives.
type collector struct {
	mu  sync.Mutex
	got []consumedMessage
}

func (c *collector) add(m consumedMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, m)
}

// waitFor waits until it holds at least n messages and returns them.
func (c *collector) waitFor(t *testing.T, n int) []consumedMessage {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.got) >= n
	}, 20*time.Second, 20*time.Millisecond, "every message reaches the consumer")
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]consumedMessage(nil), c.got...)
}

// TestRabbitMQDestinationOutage: 1,000 messages to a RabbitMQ exchange
// through a proxy that is cut mid-run and restored: the breaker opens,
// every message is consumed with a valid signature, the backlog drains,
// and only attempts in flight at the cut may come twice.
func TestRabbitMQDestinationOutage(t *testing.T) {
	t.Parallel()
	requireListening(t, "RabbitMQ", rabbitMQAddr)
	conn, err := amqp.Dial("amqp://guest:guest@" + rabbitMQAddr + "/")
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	exchange := testName(t)
	require.NoError(t, ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil))
	q, err := ch.QueueDeclare(exchange, false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "hooks", exchange, false, nil))
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	var c collector
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range deliveries {
			h := map[string]string{}
			for k, v := range d.Headers {
				h[k], _ = v.(string)
			}
			c.add(consumedMessage{headers: h, body: d.Body})
		}
	})
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(q.Name, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
		_ = conn.Close()
		wg.Wait()
	})

	proxy := newTCPProxy(t, rabbitMQAddr)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.RabbitMQ, &destination.RabbitMQConfig{URL: "amqp://" + proxy.addr + "/", Exchange: exchange, RoutingKey: "hooks",
		Username: "guest", Password: "guest"}, false)
	ids := h.send(1000)
	f := h.outage(e, proxy, ids)
	dups := h.consumedOnce(ids, c.waitFor(t, len(ids)))
	t.Logf("rabbitmq outage: %d delivered at the cut, breaker open %s after it, backlog drained %s after the restore, %d duplicates",
		f.deliveredAtCut, f.openAfter, f.drainAfter, dups)
	require.LessOrEqual(t, dups, dispatcherWorkers(), "duplicates only from attempts in flight at the cut")
}

// TestNATSDestinationOutage: as TestRabbitMQDestinationOutage, to a
// JetStream subject; the stream's duplicate window drops a retry of a
// delivery it already stored.
func TestNATSDestinationOutage(t *testing.T) {
	t.Parallel()
	st, subject := natsStream(t)
	proxy := newTCPProxy(t, natsAddr)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.NATS, &destination.NATSConfig{URL: "nats://" + proxy.addr, Subject: subject}, false)
	ids := h.send(1000)
	f := h.outage(e, proxy, ids)
	dups := h.consumedOnce(ids, natsConsumed(t, st, len(ids)))
	t.Logf("nats outage: %d delivered at the cut, breaker open %s after it, backlog drained %s after the restore, %d duplicates",
		f.deliveredAtCut, f.openAfter, f.drainAfter, dups)
	require.LessOrEqual(t, dups, dispatcherWorkers(), "duplicates only from attempts in flight at the cut")
}

// TestMQTTDestinationOutage: as TestRabbitMQDestinationOutage, to an
// MQTT topic.
func TestMQTTDestinationOutage(t *testing.T) {
	t.Parallel()
	topic, c := mqttSubscriber(t)
	proxy := newTCPProxy(t, mqttAddr)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.MQTT, &destination.MQTTConfig{URL: "tcp://" + proxy.addr, Topic: topic}, false)
	ids := h.send(1000)
	f := h.outage(e, proxy, ids)
	dups := h.consumedOnce(ids, c.waitFor(t, len(ids)))
	t.Logf("mqtt outage: %d delivered at the cut, breaker open %s after it, backlog drained %s after the restore, %d duplicates",
		f.deliveredAtCut, f.openAfter, f.drainAfter, dups)
	require.LessOrEqual(t, dups, dispatcherWorkers(), "duplicates only from attempts in flight at the cut")
}
