package destination_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hookd/hookd/internal/destination"
)

const pubsubProject = "hookd-test"

// pubsubServer is Pub/Sub's own test server, closed at the test's end,
// and the client options that reach it.
func pubsubServer(t *testing.T, opts ...pstest.ServerReactorOption) (*pstest.Server, []option.ClientOption) {
	t.Helper()
	srv := pstest.NewServer(opts...)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, []option.ClientOption{option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
}

func pubsubConfig(topic string) *destination.PubSubConfig {
	return &destination.PubSubConfig{Project: pubsubProject, Topic: topic, CredentialsJSON: `{"type":"service_account"}`}
}

func TestPubSubPublishes(t *testing.T) {
	t.Parallel()
	_, opts := pubsubServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pubsub.NewClient(ctx, pubsubProject, opts...)
	require.NoError(t, err)
	defer admin.Close()
	topic := "projects/" + pubsubProject + "/topics/hooks"
	sub := "projects/" + pubsubProject + "/subscriptions/hooks"
	_, err = admin.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic})
	require.NoError(t, err)
	_, err = admin.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic})
	require.NoError(t, err)

	s := newSigner(t)
	pool := newPool(t, destination.Deps{PubSubOptions: opts})
	cfg := pubsubConfig("hooks")
	require.NoError(t, cfg.Validate())
	const n = 200
	msgs := s.messages("ps", n)
	for id, m := range msgs {
		m.OrderingKey = "ep_ps"
		msgs[id] = m
	}
	start := time.Now()
	publishEach(t, pool, cfg, msgs)
	t.Logf("published %d in %s", n, time.Since(start))

	got := newConsumed(t, s, msgs)
	errs := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- admin.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			if m.OrderingKey != "ep_ps" {
				errs <- errMismatch(m.ID)
				return
			}
			if err := got.add(m.Attributes, m.Data); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}()
	got.wait(errs)
	t.Logf("consumed %d in %s", n, time.Since(start))
	stop()
	require.NoError(t, <-done)
}

func TestPubSubClassifiesFailures(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	m := s.message("fail", 0)

	t.Run("credentials refused", func(t *testing.T) {
		t.Parallel()
		_, opts := pubsubServer(t, pstest.WithErrorInjection("Publish", codes.Unauthenticated, "invalid key"))
		pool := newPool(t, destination.Deps{PubSubOptions: opts})
		r := publish(pool, pubsubConfig("hooks"), m)
		require.Equal(t, destination.AuthRefused, r.Outcome, "%v", r.Err)
	})
	t.Run("missing topic", func(t *testing.T) {
		t.Parallel()
		_, opts := pubsubServer(t)
		pool := newPool(t, destination.Deps{PubSubOptions: opts})
		requireRefused(t, publish(pool, pubsubConfig("nowhere"), m))
	})
	t.Run("server closed", func(t *testing.T) {
		t.Parallel()
		srv, opts := pubsubServer(t)
		// The client's own retries of the publish end with the pool's
		// dial timeout, and its Close waits for them.
		pool := destination.NewPool(destination.PoolConfig{DialTimeout: publishTimeout}, destination.Deps{PubSubOptions: opts})
		t.Cleanup(pool.Close)
		require.NoError(t, srv.Close())
		requireFailedWithin(t, publishWithin(pool, pubsubConfig("hooks"), m), destination.Unreachable, destination.Timeout)
	})
}
