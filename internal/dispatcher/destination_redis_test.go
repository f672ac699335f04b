package dispatcher_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/store"
)

const redisAddr = "127.0.0.1:6379"

// redisStream is a stream key of the test's own on the machine's Redis,
// deleted at its end, and a client reading it.
func redisStream(t *testing.T, name string) (redis.Conn, string) {
	t.Helper()
	requireListening(t, "Redis", redisAddr)
	stream := testName(t) + ":" + name
	c, err := redis.Dial("tcp", redisAddr, redis.DialConnectTimeout(5*time.Second), redis.DialReadTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = c.Do("DEL", stream)
		_ = c.Close()
	})
	return c, stream
}

// redisConsumed reads every entry of a stream.
func redisConsumed(t *testing.T, c redis.Conn, stream string) []consumedMessage {
	t.Helper()
	entries, err := redis.Values(c.Do("XRANGE", stream, "-", "+"))
	require.NoError(t, err)
	out := make([]consumedMessage, 0, len(entries))
	for _, e := range entries {
		// An entry is its id and its fields, name then value.
		idFields, err := redis.Values(e, nil)
		require.NoError(t, err)
		require.Len(t, idFields, 2)
		h, err := redis.StringMap(idFields[1], nil)
		require.NoError(t, err)
		out = append(out, consumedMessage{headers: h, body: []byte(h[destination.RedisBodyField])})
	}
	return out
}

// TestRedisDestinationDelivers: 1,000 messages to a Redis stream
// endpoint are each delivered, and consumed once with a valid signature.
func TestRedisDestinationDelivers(t *testing.T) {
	t.Parallel()
	c, stream := redisStream(t, "delivers")
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.Redis, &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream, MaxLen: 100000}, false)
	start := time.Now()
	ids := h.send(1000)
	h.waitDelivered(e.ID, len(ids), waitFor)
	t.Logf("1000 messages delivered to redis in %s", time.Since(start))
	require.Zero(t, h.consumedOnce(ids, redisConsumed(t, c, stream)), "no duplicate without an outage")
}

// TestRedisDestinationOutage: the broker becomes unreachable mid-run (a
// proxy between dispatcher and Redis is cut): the breaker opens, nothing
// is lost, the backlog drains once it is back, and only attempts in
// flight at the cut may be consumed twice.
func TestRedisDestinationOutage(t *testing.T) {
	t.Parallel()
	c, stream := redisStream(t, "outage")
	proxy := newTCPProxy(t, redisAddr)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.Redis, &destination.RedisConfig{URL: "redis://" + proxy.Addr(), Stream: stream, MaxLen: 100000}, false)
	ids := h.send(1000)
	f := h.outage(e, proxy, ids)
	dups := h.consumedOnce(ids, redisConsumed(t, c, stream))
	t.Logf("redis outage: %d delivered at the cut, breaker open %s after it, backlog drained %s after the restore, %d duplicates",
		f.deliveredAtCut, f.openAfter, f.drainAfter, dups)
	require.LessOrEqual(t, dups, dispatcherWorkers(), "duplicates only from attempts in flight at the cut")
}

// TestRedisDestinationWrongCredentials: a Redis user that does not exist
// (WRONGPASS) is the auth wall: the endpoint is disabled for it.
func TestRedisDestinationWrongCredentials(t *testing.T) {
	t.Parallel()
	_, stream := redisStream(t, "auth")
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.Redis, &destination.RedisConfig{URL: "redis://" + redisAddr, Stream: stream,
		Username: "hookdtest-nobody", Password: "wrong"}, false)
	h.send(10)
	h.requireAuthDisabled(e.ID)
}

// requireAuthDisabled waits until the endpoint is disabled for its auth
// failures, and checks its attempts say what the broker said.
func (h *destHarness) requireAuthDisabled(endpointID string) {
	h.t.Helper()
	var got store.Endpoint
	require.Eventually(h.t, func() bool {
		var err error
		got, err = h.st.GetEndpoint(h.t.Context(), endpointID)
		require.NoError(h.t, err)
		return got.Status == store.EndpointDisabled
	}, waitFor, 20*time.Millisecond, "the endpoint is disabled by its auth failures")
	require.NotNil(h.t, got.DisabledReason)
	require.Equal(h.t, "auth_failures", *got.DisabledReason)
	// The last attempt met the wall (RabbitMQ's first may be a timeout:
	// it delays its refusal).
	var class, ec, excerpt string
	var status *int
	require.NoError(h.t, h.db.Pool.QueryRow(h.t.Context(), `
		SELECT classification, error_class, response_excerpt, status_code FROM delivery_attempts WHERE endpoint_id = $1 ORDER BY id DESC LIMIT 1`,
		endpointID).Scan(&class, &ec, &excerpt, &status))
	require.Equal(h.t, "auth_failure", class)
	require.Equal(h.t, "auth_refused", ec)
	require.Nil(h.t, status, "no status code")
	require.NotEmpty(h.t, excerpt, "what the broker said")
}
