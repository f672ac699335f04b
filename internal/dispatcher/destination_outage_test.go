package dispatcher_test

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/store"
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

// waitForIDs waits until every one of ids has arrived and returns all
// that did, duplicates included. Not a count of messages: a duplicate
// (an attempt in flight at a cut, or QoS 1's redelivery) would make the
// count before the last of ids had come.
func (c *collector) waitForIDs(t *testing.T, ids []string) []consumedMessage {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		seen := map[string]bool{}
		for _, m := range c.got {
			seen[m.headers[destination.HeaderID]] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "every message reaches the consumer")
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]consumedMessage(nil), c.got...)
}

// rabbitMQQueue is an exchange of the test's own on the machine's
// RabbitMQ, with a queue bound to it for the routing key "hooks" whose
// messages a consumer collects in order; both are deleted at the test's
// end.
func rabbitMQQueue(t *testing.T) (string, *collector) {
	t.Helper()
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
	c := &collector{}
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
	return exchange, c
}

// TestRabbitMQDestinationOutage: 1,000 messages to a RabbitMQ exchange
// through a proxy that is cut mid-run and restored: the breaker opens,
// every message is consumed with a valid signature, the backlog drains,
// and only attempts in flight at the cut may come twice.
func TestRabbitMQDestinationOutage(t *testing.T) {
	t.Parallel()
	exchange, c := rabbitMQQueue(t)
	proxy := newTCPProxy(t, rabbitMQAddr)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.RabbitMQ, &destination.RabbitMQConfig{URL: "amqp://" + proxy.Addr() + "/", Exchange: exchange, RoutingKey: "hooks",
		Username: "guest", Password: "guest"}, false)
	ids := h.send(1000)
	f := h.outage(e, proxy, ids)
	dups := h.consumedOnce(ids, c.waitForIDs(t, ids))
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
	e := h.endpoint(destination.NATS, &destination.NATSConfig{URL: "nats://" + proxy.Addr(), Subject: subject}, false)
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
	e := h.endpoint(destination.MQTT, &destination.MQTTConfig{URL: "tcp://" + proxy.Addr(), Topic: topic}, false)
	ids := h.send(1000)
	f := h.outage(e, proxy, ids)
	dups := h.consumedOnce(ids, c.waitForIDs(t, ids))
	t.Logf("mqtt outage: %d delivered at the cut, breaker open %s after it, backlog drained %s after the restore, %d duplicates",
		f.deliveredAtCut, f.openAfter, f.drainAfter, dups)
	require.LessOrEqual(t, dups, dispatcherWorkers(), "duplicates only from attempts in flight at the cut")
}

// TestPubSubDestinationOutage: the test's Pub/Sub server is closed
// mid-run and another started on its port: the breaker opens, every
// message reaches one of the two servers with a valid signature, the
// backlog drains, and only attempts in flight at the stop may come twice.
func TestPubSubDestinationOutage(t *testing.T) {
	t.Parallel()
	first := pstest.NewServer()
	_, port, err := net.SplitHostPort(first.Addr)
	require.NoError(t, err)
	opts := []option.ClientOption{option.WithEndpoint(first.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	const project = "hookd-test"
	topic := func(srv *pstest.Server) {
		t.Helper()
		admin, err := pubsub.NewClient(t.Context(), project, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
		require.NoError(t, err)
		defer admin.Close()
		_, err = admin.TopicAdminClient.CreateTopic(t.Context(), &pubsubpb.Topic{Name: "projects/" + project + "/topics/hooks"})
		require.NoError(t, err)
	}
	topic(first)
	h := startDest(t, dispatcher.Deps{PubSubOptions: opts})
	e := h.endpoint(destination.PubSub, &destination.PubSubConfig{Project: project, Topic: "hooks", CredentialsJSON: `{"type":"service_account"}`}, false)
	ids := h.send(1000)

	require.Eventually(t, func() bool { return h.statuses(e.ID)[store.DeliveryDelivered] >= len(ids)/3 }, waitFor, 10*time.Millisecond)
	require.NoError(t, first.Close())
	stoppedAt := time.Now()
	require.Eventually(t, func() bool { return h.breakerState(e.ID) == "open" }, 20*time.Second, 20*time.Millisecond,
		"the breaker opens while the server is down")
	openAfter := time.Since(stoppedAt)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	second := pstest.NewServerWithPort(n)
	t.Cleanup(func() { _ = second.Close() })
	topic(second)
	restartedAt := time.Now()
	h.waitDelivered(e.ID, len(ids), waitFor)
	drainAfter := time.Since(restartedAt)
	require.Equal(t, map[string]int{store.DeliveryDelivered: len(ids)}, h.statuses(e.ID), "nothing lost")

	var got []consumedMessage
	for _, srv := range []*pstest.Server{first, second} {
		for _, m := range srv.Messages() {
			got = append(got, consumedMessage{headers: m.Attributes, body: m.Data})
		}
	}
	dups := h.consumedOnce(ids, got)
	t.Logf("pubsub outage: breaker open %s after the stop, backlog drained %s after the restart, %d duplicates", openAfter, drainAfter, dups)
	require.LessOrEqual(t, dups, dispatcherWorkers(), "duplicates only from attempts in flight at the stop")
}

// TestKafkaDestinationOutage: the test's Kafka (kfake) stops taking
// records mid-run, closing every connection that produces, and takes
// them again later: the breaker opens, every message is consumed with a
// valid signature, the backlog drains, and only attempts in flight at
// the stop may come twice.
func TestKafkaDestinationOutage(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "hooks"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	var down atomic.Bool
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if down.Load() {
			return nil, errors.New("broker down"), true
		}
		return nil, nil, false
	})
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.Kafka, &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: "hooks"}, false)
	ids := h.send(1000)
	require.Eventually(t, func() bool { return h.statuses(e.ID)[store.DeliveryDelivered] >= len(ids)/3 }, waitFor, 10*time.Millisecond)
	down.Store(true)
	stoppedAt := time.Now()
	require.Eventually(t, func() bool { return h.breakerState(e.ID) == "open" }, 20*time.Second, 20*time.Millisecond,
		"the breaker opens while the broker takes nothing")
	openAfter := time.Since(stoppedAt)
	down.Store(false)
	restoredAt := time.Now()
	h.waitDelivered(e.ID, len(ids), waitFor)
	drainAfter := time.Since(restoredAt)
	require.Equal(t, map[string]int{store.DeliveryDelivered: len(ids)}, h.statuses(e.ID), "nothing lost")
	dups := h.consumedOnce(ids, kafkaRecords(t, cluster.ListenAddrs(), "hooks", len(ids)))
	t.Logf("kafka outage: breaker open %s after the stop, backlog drained %s after the restore, %d duplicates", openAfter, drainAfter, dups)
	require.LessOrEqual(t, dups, dispatcherWorkers(), "duplicates only from attempts in flight at the stop")
}
