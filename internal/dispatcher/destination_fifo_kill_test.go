package dispatcher_test

import (
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/e2e"
	"github.com/hookd/hookd/internal/store"
)

// TestFIFOOrderOfEachTypeThroughAKilledDispatcher: a FIFO endpoint of
// each destination type with an ordering notion (a Kafka partition, a
// JetStream subject, a Redis stream, a RabbitMQ queue, an MQTT topic, a
// Pub/Sub ordering key), 150 messages to each through two dispatcher
// processes; the one running a FIFO head is SIGKILLed a third of the way
// through. Every message is consumed, verified, and each type's first
// receipts are in the order of acceptance: the kill made a head wait for
// its rescue and be published again, never a later message first.
// Duplicates come only from the publishes in flight at the kill, one
// per endpoint at most.
func TestFIFOOrderOfEachTypeThroughAKilledDispatcher(t *testing.T) {
	t.Parallel()
	const messages = 150
	h := prepareDest(t)

	type fifoDest struct {
		typ      destination.Type
		endpoint store.Endpoint
		consumed func(ids []string) []consumedMessage
	}
	var dests []*fifoDest
	add := func(typ destination.Type, cfg destination.Config, consumed func(ids []string) []consumedMessage) {
		dests = append(dests, &fifoDest{typ: typ, endpoint: h.endpoint(typ, cfg, true), consumed: consumed})
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ordered"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	add(destination.Kafka, &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: "ordered"},
		func(ids []string) []consumedMessage {
			return kafkaRecords(t, cluster.ListenAddrs(), "ordered", len(ids))
		})

	stream, subject := natsStream(t)
	add(destination.NATS, &destination.NATSConfig{URL: "nats://" + natsAddr, Subject: subject}, func(ids []string) []consumedMessage {
		info, err := stream.Info(t.Context())
		require.NoError(t, err)
		return natsConsumed(t, stream, int(info.State.Msgs))
	})

	rc, key := redisStream(t, "ordered")
	add(destination.Redis, &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: key},
		func([]string) []consumedMessage { return redisConsumed(t, rc, key) })

	exchange, rabbit := rabbitMQQueue(t)
	add(destination.RabbitMQ, &destination.RabbitMQConfig{URL: "amqp://" + rabbitMQAddr + "/", Exchange: exchange, RoutingKey: "hooks",
		Username: "guest", Password: "guest"}, func(ids []string) []consumedMessage { return rabbit.waitForIDs(t, ids) })

	topic, mq := mqttSubscriber(t)
	add(destination.MQTT, &destination.MQTTConfig{URL: "tcp://" + mqttAddr, Topic: topic},
		func(ids []string) []consumedMessage { return mq.waitForIDs(t, ids) })

	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	const project = "hookd-test"
	admin, err := pubsub.NewClient(t.Context(), project, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	_, err = admin.TopicAdminClient.CreateTopic(t.Context(), &pubsubpb.Topic{Name: "projects/" + project + "/topics/ordered"})
	require.NoError(t, err)
	add(destination.PubSub, &destination.PubSubConfig{Project: project, Topic: "ordered", CredentialsJSON: `{"type":"service_account"}`},
		func([]string) []consumedMessage {
			var got []consumedMessage
			for _, m := range srv.Messages() {
				got = append(got, consumedMessage{headers: m.Attributes, body: m.Data})
			}
			return got
		})

	endpointIDs := make([]string, len(dests))
	for i, d := range dests {
		endpointIDs[i] = d.endpoint.ID
	}
	env := map[string]string{"WORKERS": "20", "REQUEST_TIMEOUT": "2s", "RETRY_SCHEDULE": destRetrySchedule,
		"PUBSUB_EMULATOR_HOST": srv.Addr}
	dispatchers := e2e.StartDispatchers(t, h.db.URL, env, "dispatcher-1", "dispatcher-2")
	ids := h.send(messages)
	total := messages * len(dests)
	delivered := func() int {
		var n int
		require.NoError(t, h.db.Pool.QueryRow(t.Context(), `
			SELECT count(*) FROM deliveries WHERE endpoint_id = ANY($1) AND status = 'delivered'`, endpointIDs).Scan(&n))
		return n
	}
	e2e.Eventually(t, time.Minute, 10*time.Millisecond, "a third delivered", func() bool { return delivered() >= total/3 })

	// A FIFO head's job is running: River's attempted_by names the client.
	var client string
	e2e.Eventually(t, 10*time.Second, 5*time.Millisecond, "a FIFO head's job is running", func() bool {
		return h.db.Pool.QueryRow(t.Context(), `
			SELECT attempted_by[array_upper(attempted_by, 1)] FROM river_job
			WHERE state = 'running' AND kind = 'deliver' AND args->>'endpoint_id' = ANY($1) LIMIT 1`, endpointIDs).Scan(&client) == nil
	})
	var victim *e2e.Dispatcher
	for _, d := range dispatchers {
		if d.RiverClient == client {
			victim = d
		}
	}
	require.NotNil(t, victim, "a dispatcher runs client %s", client)
	victim.Kill()
	killedAt, killed := delivered(), time.Now()
	require.Less(t, killedAt, total, "the kill landed mid-run")

	e2e.Eventually(t, 3*time.Minute, 100*time.Millisecond, "every message delivered", func() bool { return delivered() == total })
	recovered := time.Since(killed)
	var wg sync.WaitGroup
	dups := make([]int, len(dests))
	got := make([][]consumedMessage, len(dests))
	for i, d := range dests {
		wg.Go(func() { got[i] = d.consumed(ids) })
	}
	wg.Wait()
	for i, d := range dests {
		t.Run(string(d.typ), func(t *testing.T) {
			dups[i] = h.consumedOnce(ids, got[i])
			requireOrder(t, ids, got[i])
			require.LessOrEqual(t, dups[i], 1, "only the publish in flight at the kill comes twice")
		})
	}
	t.Logf("killed %s with %d of %d deliveries made; all delivered %.1f s after the kill; duplicates by type %v",
		victim.Name, killedAt, total, recovered.Seconds(), dups)
}
