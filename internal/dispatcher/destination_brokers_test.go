package dispatcher_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/dispatcher"
)

const (
	natsAddr     = "127.0.0.1:4222"
	mqttAddr     = "127.0.0.1:1883"
	rabbitMQAddr = "127.0.0.1:5672"
)

// testName is a name of the test's own on a shared broker: letters and
// digits only, valid as a stream, exchange, topic level or key.
func testName(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return "hookdtest" + hex.EncodeToString(b[:])
}

// kafkaRecords reads topic from the start: at least n records, and on to
// every partition's high watermark (duplicates included).
func kafkaRecords(t *testing.T, brokers []string, topic string, n int) []consumedMessage {
	t.Helper()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	next, end := map[int32]int64{}, map[int32]int64{}
	behind := func() bool {
		for p, e := range end {
			if next[p] < e {
				return true
			}
		}
		return false
	}
	var out []consumedMessage
	for len(out) < n || behind() {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, fs.Err0(), "%d of %d records read", len(out), n)
		fs.EachPartition(func(p kgo.FetchTopicPartition) { end[p.Partition] = p.HighWatermark })
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, rh := range r.Headers {
				h[rh.Key] = string(rh.Value)
			}
			out = append(out, consumedMessage{headers: h, body: r.Value})
			next[r.Partition] = r.Offset + 1
		})
	}
	return out
}

// TestKafkaDestinationDelivers: 1,000 messages to a Kafka topic (kfake,
// started by the test, three partitions) are consumed once with valid
// signatures; a FIFO endpoint's 200 messages, keyed by its ordering key,
// are consumed in the order they were accepted.
func TestKafkaDestinationDelivers(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "hooks", "ordered"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.Kafka, &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: "hooks"}, false)
	start := time.Now()
	ids := h.send(1000)
	h.waitDelivered(e.ID, len(ids), waitFor)
	t.Logf("1000 messages delivered to kafka in %s", time.Since(start))
	require.Zero(t, h.consumedOnce(ids, kafkaRecords(t, cluster.ListenAddrs(), "hooks", len(ids))))

	// The FIFO endpoint gets the next messages (the first endpoint's
	// are all delivered): it is created now and receives only these.
	_, err = h.db.Pool.Exec(t.Context(), `UPDATE endpoints SET deleted_at = now() WHERE id = $1`, e.ID)
	require.NoError(t, err)
	fifo := h.endpoint(destination.Kafka, &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: "ordered"}, true)
	ordered := h.send(200)
	h.waitDelivered(fifo.ID, len(ordered), waitFor)
	got := kafkaRecords(t, cluster.ListenAddrs(), "ordered", len(ordered))
	require.Zero(t, h.consumedOnce(ordered, got))
	requireOrder(t, ordered, got)
}

// requireOrder requires got, deduplicated, in the order of ids.
func requireOrder(t *testing.T, ids []string, got []consumedMessage) {
	t.Helper()
	var order []string
	seen := map[string]bool{}
	for _, m := range got {
		if id := m.headers[destination.HeaderID]; !seen[id] {
			seen[id] = true
			order = append(order, id)
		}
	}
	require.Equal(t, ids, order, "a FIFO endpoint's messages arrive in the order they were accepted")
}

// natsStream is a JetStream stream of the test's own on the machine's
// NATS, deleted at its end, and the subject it captures.
func natsStream(t *testing.T) (jetstream.Stream, string) {
	t.Helper()
	requireListening(t, "NATS", natsAddr)
	name := testName(t)
	nc, err := nats.Connect("nats://" + natsAddr)
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".events"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
		nc.Close()
	})
	return st, name + ".events"
}

// natsConsumed reads the stream's n messages.
func natsConsumed(t *testing.T, st jetstream.Stream, n int) []consumedMessage {
	t.Helper()
	cons, err := st.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var got []consumedMessage
	for len(got) < n {
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		k := 0
		for msg := range batch.Messages() {
			k++
			hd := map[string]string{}
			for key := range msg.Headers() {
				hd[key] = msg.Headers().Get(key)
			}
			got = append(got, consumedMessage{headers: hd, body: msg.Data()})
		}
		require.NoError(t, batch.Error())
		require.NotZero(t, k, "%d of %d consumed", len(got), n)
	}
	return got
}

// TestNATSDestinationDelivers: 1,000 messages to a JetStream subject on
// the machine's NATS are consumed once with valid signatures.
func TestNATSDestinationDelivers(t *testing.T) {
	t.Parallel()
	st, subject := natsStream(t)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.NATS, &destination.NATSConfig{URL: "nats://" + natsAddr, Subject: subject}, false)
	start := time.Now()
	ids := h.send(1000)
	h.waitDelivered(e.ID, len(ids), waitFor)
	t.Logf("1000 messages delivered to nats in %s", time.Since(start))
	require.Zero(t, h.consumedOnce(ids, natsConsumed(t, st, len(ids))))
}

// mqttSubscriber subscribes, QoS 1, to a topic of the test's own on the
// machine's Mosquitto and collects what arrives, in order.
func mqttSubscriber(t *testing.T) (string, *collector) {
	t.Helper()
	requireListening(t, "Mosquitto", mqttAddr)
	topic := "hookdtest/" + testName(t) + "/events"
	c := &collector{}
	cl := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + mqttAddr).SetClientID(testName(t)).SetCleanSession(true).SetOrderMatters(true))
	tok := cl.Connect()
	require.True(t, tok.WaitTimeout(5*time.Second))
	require.NoError(t, tok.Error())
	t.Cleanup(func() { cl.Disconnect(250) })
	tok = cl.Subscribe(topic, 1, func(_ mqtt.Client, msg mqtt.Message) {
		var env destination.MQTTEnvelope
		if err := json.Unmarshal(msg.Payload(), &env); err != nil {
			return // missing below
		}
		c.add(consumedMessage{headers: map[string]string{destination.HeaderID: env.ID, destination.HeaderTimestamp: env.Timestamp,
			destination.HeaderSignature: env.Signature, destination.HeaderEventType: env.EventType}, body: []byte(env.Body)})
	})
	require.True(t, tok.WaitTimeout(5*time.Second))
	require.NoError(t, tok.Error())
	return topic, c
}

// TestMQTTDestinationKeepsOrder: a FIFO endpoint's 300 messages to an
// MQTT topic on the machine's Mosquitto arrive once each, verified, in
// the order they were accepted.
func TestMQTTDestinationKeepsOrder(t *testing.T) {
	t.Parallel()
	topic, c := mqttSubscriber(t)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.MQTT, &destination.MQTTConfig{URL: "tcp://" + mqttAddr, Topic: topic}, true)
	ids := h.send(300)
	h.waitDelivered(e.ID, len(ids), waitFor)
	got := c.waitForIDs(t, ids)
	require.Zero(t, h.consumedOnce(ids, got))
	requireOrder(t, ids, got)
}

// TestRabbitMQDestinationWrongCredentials: RabbitMQ refusing the
// password disables the endpoint for its auth failures. RabbitMQ delays
// its refusal: on a busy machine past the harness's 2 s timeout, and a
// timeout between two refusals restarts the auth streak, so this test's
// attempts may take 15 s (the dispatcher's default).
func TestRabbitMQDestinationWrongCredentials(t *testing.T) {
	t.Parallel()
	requireListening(t, "RabbitMQ", rabbitMQAddr)
	h := startDest(t, dispatcherDeps(), func(c *dispatcher.Config) { c.RequestTimeout = 15 * time.Second })
	e := h.endpoint(destination.RabbitMQ, &destination.RabbitMQConfig{URL: "amqp://" + rabbitMQAddr, RoutingKey: testName(t),
		Username: "guest", Password: "not-the-password"}, false)
	h.send(10)
	h.requireAuthDisabled(e.ID)
}

// TestPubSubDestinationDelivers: 1,000 messages to a Pub/Sub topic (the
// test's pstest server) are received once with valid signatures.
func TestPubSubDestinationDelivers(t *testing.T) {
	t.Parallel()
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	opts := []option.ClientOption{option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	const project = "hookd-test"
	admin, err := pubsub.NewClient(t.Context(), project, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	topic := "projects/" + project + "/topics/hooks"
	_, err = admin.TopicAdminClient.CreateTopic(t.Context(), &pubsubpb.Topic{Name: topic})
	require.NoError(t, err)

	h := startDest(t, dispatcher.Deps{PubSubOptions: opts})
	e := h.endpoint(destination.PubSub, &destination.PubSubConfig{Project: project, Topic: "hooks", CredentialsJSON: `{"type":"service_account"}`}, false)
	start := time.Now()
	ids := h.send(1000)
	h.waitDelivered(e.ID, len(ids), waitFor)
	t.Logf("1000 messages delivered to pubsub in %s", time.Since(start))
	var got []consumedMessage
	for _, m := range srv.Messages() {
		got = append(got, consumedMessage{headers: m.Attributes, body: m.Data})
	}
	require.Zero(t, h.consumedOnce(ids, got))
}

// TestKafkaDestinationWrongCredentials: a SASL user without the right
// to write (kfake with ACLs) is Kafka's authorization refusal: the
// endpoint is disabled for its auth failures.
func TestKafkaDestinationWrongCredentials(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "hooks"),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "right"),
		kfake.User("PLAIN", "reader", "right", kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "hooks",
			Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true}))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.Kafka, &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: "hooks",
		SASLMechanism: "plain", Username: "reader", Password: "right"}, false)
	h.send(10)
	h.requireAuthDisabled(e.ID)
}

// TestPubSubDestinationWrongCredentials: Pub/Sub refusing the key
// (Unauthenticated) disables the endpoint for its auth failures.
func TestPubSubDestinationWrongCredentials(t *testing.T) {
	t.Parallel()
	srv := pstest.NewServer(pstest.WithErrorInjection("Publish", codes.Unauthenticated, "invalid key"))
	t.Cleanup(func() { _ = srv.Close() })
	opts := []option.ClientOption{option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	h := startDest(t, dispatcher.Deps{PubSubOptions: opts})
	e := h.endpoint(destination.PubSub, &destination.PubSubConfig{Project: "hookd-test", Topic: "hooks", CredentialsJSON: `{"type":"service_account"}`}, false)
	h.send(10)
	h.requireAuthDisabled(e.ID)
}
