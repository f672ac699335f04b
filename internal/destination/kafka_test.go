package destination_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/hookd/hookd/internal/destination"
)

// kafkaCluster is franz-go's in-process Kafka, with SASL/PLAIN and ACLs
// (hookd may do anything; reader may only describe the topic), closed at
// the test's end.
func kafkaCluster(t *testing.T, topic string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "hookd", "right"),
		kfake.User("PLAIN", "reader", "right", kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic,
			Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true}))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestKafkaPublishes(t *testing.T) {
	t.Parallel()
	topic := unique(t)
	cluster := kafkaCluster(t, topic)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: topic, KeyPath: "customer.id",
		SASLMechanism: "plain", Username: "hookd", Password: "right"}
	require.NoError(t, cfg.Validate())

	const n = 200
	msgs := publishAll(t, pool, cfg, s, topic, n)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SASL(plain.Auth{User: "hookd", Pass: "right"}.AsMechanism()))
	require.NoError(t, err)
	defer consumer.Close()
	got := newConsumed(t, s, msgs)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got.seen) < n {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, rh := range r.Headers {
				h[rh.Key] = string(rh.Value)
			}
			require.NoError(t, got.add(h, r.Value))
			// The key is the payload's customer.id.
			m := msgs[h[destination.HeaderID]]
			require.Equal(t, fmt.Sprintf("cus_%d", mustN(t, m.Body)%7), string(r.Key))
		})
	}
	got.wait(nil)
}

func mustN(t *testing.T, body []byte) int {
	t.Helper()
	var v struct{ N int }
	require.NoError(t, jsonUnmarshal(body, &v))
	return v.N
}

func TestKafkaClassifiesFailures(t *testing.T) {
	t.Parallel()
	topic := unique(t)
	cluster := kafkaCluster(t, topic)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})

	// A user without the right to write: Kafka's authorization refusal.
	// (A wrong password is refused by kfake by closing the connection,
	// where Kafka answers SASL_AUTHENTICATION_FAILED: not testable here.)
	reader := &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: topic, SASLMechanism: "plain", Username: "reader", Password: "right"}
	r := publish(pool, reader, s.message("k", 0))
	require.Equal(t, destination.AuthRefused, r.Outcome, "%v", r.Err)

	right := &destination.KafkaConfig{Brokers: cluster.ListenAddrs(), Topic: topic, SASLMechanism: "plain", Username: "hookd", Password: "right"}
	r = publish(pool, right, s.message("k", 1))
	require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)

	// The cluster stops: a publish fails within its deadline.
	cluster.Close()
	requireFailedWithin(t, publishWithin(pool, right, s.message("k", 2)), destination.Timeout, destination.Unreachable)

	nothing := &destination.KafkaConfig{Brokers: []string{closedAddr(t)}, Topic: topic}
	requireFailedWithin(t, publishWithin(pool, nothing, s.message("k", 3)), destination.Timeout, destination.Unreachable)
}
