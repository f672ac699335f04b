package destination_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/sdk/go/webhook"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// publishTimeout is the deadline of a publish whose failure must come
// within it (publishWithin): the endpoint's timeout.
const publishTimeout = 2 * time.Second

// answerTimeout is the deadline of a publish that must get an answer
// (publish): a broker's answer, a refusal included, may take longer than
// publishTimeout on a loaded machine (a Kafka client's first publish
// connects, authenticates and reads the metadata first).
const answerTimeout = 30 * time.Second

// slack is what a failed publish may take past its deadline.
const slack = 500 * time.Millisecond

// unique names a test's own namespace on a shared server.
func unique(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return "hookdtest" + hex.EncodeToString(b[:])
}

// signer makes a test's messages, signed as the delivery package signs
// an HTTP attempt, and verifies them with the SDK's verifier.
type signer struct {
	secret   string
	key      delivery.Secret
	verifier *webhook.Verifier
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	s, err := delivery.GenerateSecret(rand.Reader)
	require.NoError(t, err)
	key, err := delivery.ParseSecret(s)
	require.NoError(t, err)
	v, err := webhook.NewVerifier([]string{s})
	require.NoError(t, err)
	return &signer{secret: s, key: key, verifier: v}
}

// message is the i-th message of a test.
func (s *signer) message(prefix string, i int) destination.Message {
	id := fmt.Sprintf("msg_%s_%04d", prefix, i)
	body := fmt.Appendf(nil, `{"n":%d,"customer":{"id":"cus_%d"},"text":"caf\u00e9 \"quoted\""}`, i, i%7)
	now := time.Now()
	return destination.Message{
		ID: id, DeliveryID: "dlv_" + id, EndpointID: "ep_" + prefix, EventType: "invoice.paid",
		Timestamp: now, Signature: delivery.Sign(id, now, body, s.key), Body: body,
	}
}

// verify checks a consumed message's headers and body with the SDK's
// verifier, as a consumer would, and returns its webhook-id.
func (s *signer) verify(t *testing.T, headers map[string]string, body []byte) string {
	t.Helper()
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	require.NoError(t, s.verifier.Verify(h, body), "signature of %s", headers[destination.HeaderID])
	require.Equal(t, "invoice.paid", headers[destination.HeaderEventType])
	return headers[destination.HeaderID]
}

// newPool is a pool without the SSRF guard (the tests' brokers are on
// loopback, as with ALLOW_PRIVATE_TARGETS) that is closed at the end.
func newPool(t *testing.T, deps destination.Deps) *destination.Pool {
	t.Helper()
	p := destination.NewPool(destination.PoolConfig{IdleTimeout: time.Minute, DialTimeout: 5 * time.Second}, deps)
	t.Cleanup(p.Close)
	return p
}

// publish publishes one message that must get an answer, within
// answerTimeout.
func publish(p *destination.Pool, c destination.Config, m destination.Message) destination.Result {
	return publishIn(answerTimeout, p, c, m)
}

// publishWithin publishes one message within publishTimeout, for a
// failure that must come within it (requireFailedWithin).
func publishWithin(p *destination.Pool, c destination.Config, m destination.Message) destination.Result {
	return publishIn(publishTimeout, p, c, m)
}

// publishIn publishes one message with a deadline d away.
func publishIn(d time.Duration, p *destination.Pool, c destination.Config, m destination.Message) destination.Result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return p.Publish(ctx, c, m)
}

// messages are n messages of a test, by id.
func (s *signer) messages(prefix string, n int) map[string]destination.Message {
	msgs := map[string]destination.Message{}
	for i := range n {
		m := s.message(prefix, i)
		msgs[m.ID] = m
	}
	return msgs
}

// publishAll publishes msgs from 8 goroutines, requires each confirmed,
// and returns them.
func publishAll(t *testing.T, p *destination.Pool, c destination.Config, s *signer, prefix string, n int) map[string]destination.Message {
	t.Helper()
	return publishEach(t, p, c, s.messages(prefix, n))
}

// publishEach publishes msgs from 8 goroutines and requires each
// confirmed.
func publishEach(t *testing.T, p *destination.Pool, c destination.Config, msgs map[string]destination.Message) map[string]destination.Message {
	t.Helper()
	n := len(msgs)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	ids := make(chan destination.Message, n)
	for _, m := range msgs {
		ids <- m
	}
	close(ids)
	for range 8 {
		wg.Go(func() {
			for m := range ids {
				if r := publish(p, c, m); r.Outcome != destination.Confirmed {
					errs <- fmt.Errorf("%s: %s %s: %v", m.ID, r.Outcome, r.Reason, r.Err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return msgs
}

// consumed checks that every message was consumed exactly once, with a
// valid signature and its body intact.
type consumed struct {
	t    *testing.T
	s    *signer
	want map[string]destination.Message
	mu   sync.Mutex
	seen map[string]int
	all  chan struct{}
}

func newConsumed(t *testing.T, s *signer, want map[string]destination.Message) *consumed {
	return &consumed{t: t, s: s, want: want, seen: map[string]int{}, all: make(chan struct{})}
}

// add records one consumed message (safe from any goroutine; it reports
// failures with assert semantics through require only in the test
// goroutine, so it returns an error instead).
func (c *consumed) add(headers map[string]string, body []byte) error {
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	if err := c.s.verifier.Verify(h, body); err != nil {
		return fmt.Errorf("verify %s: %w", headers[destination.HeaderID], err)
	}
	id := headers[destination.HeaderID]
	m, ok := c.want[id]
	if !ok {
		return fmt.Errorf("unexpected message %q", id)
	}
	if string(m.Body) != string(body) {
		return fmt.Errorf("%s: body %q, want %q", id, body, m.Body)
	}
	if headers[destination.HeaderEventType] != m.EventType {
		return fmt.Errorf("%s: event type %q", id, headers[destination.HeaderEventType])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[id]++
	if len(c.seen) == len(c.want) {
		select {
		case <-c.all:
		default:
			close(c.all)
		}
	}
	return nil
}

// wait waits for every message, then checks none came twice.
func (c *consumed) wait(errs <-chan error) {
	c.t.Helper()
	select {
	case <-c.all:
	case err := <-errs:
		require.NoError(c.t, err)
	case <-time.After(20 * time.Second):
		c.mu.Lock()
		n := len(c.seen)
		c.mu.Unlock()
		require.FailNow(c.t, "not every message consumed", "%d of %d", n, len(c.want))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.seen {
		require.Equal(c.t, 1, n, "%s consumed %d times", id, n)
	}
}

// requireFailedWithin requires a Failed result of one of reasons that
// took no longer than the deadline and slack.
func requireFailedWithin(t *testing.T, r destination.Result, reasons ...destination.Reason) {
	t.Helper()
	require.Equal(t, destination.Failed, r.Outcome, "%v", r.Err)
	require.Contains(t, reasons, r.Reason, "%v", r.Err)
	require.Less(t, r.Duration, publishTimeout+slack)
}

// requireRefused requires a Failed result refused by the broker: an
// answer, which may take longer than publishTimeout on a loaded machine.
func requireRefused(t *testing.T, r destination.Result) {
	t.Helper()
	require.Equal(t, destination.Failed, r.Outcome, "%v", r.Err)
	require.Equal(t, destination.Refused, r.Reason, "%v", r.Err)
}

// requireRunning fails the test, clearly, when nothing listens on addr:
// the machine's broker is expected to run (.ci/run starts it).
func requireRunning(t *testing.T, name, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err, "%s is not running on %s: start it (docs/operations.md)", name, addr)
	_ = c.Close()
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// silentAddr is a loopback server that accepts connections and never
// answers: a broker hung mid-handshake.
func silentAddr(t *testing.T) string {
	t.Helper()
	addr, _ := loopbackServer(t, func(net.Conn) {})
	return addr
}

// loopbackServer listens on a loopback port of its own and runs serve on
// each connection it accepts, keeping the connection open after serve
// returns, until the test ends. It returns its address and how many
// connections it has accepted.
func loopbackServer(t *testing.T, serve func(net.Conn)) (string, func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

// startProcess starts a server of the test's own and waits until a line
// of its output contains ready; it is killed at the test's end.
func startProcess(t *testing.T, ready string, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = cmd.Stderr
	require.NoError(t, cmd.Start(), "start %s", name)
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	lines := make(chan string, 64)
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	var seen []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "%s exited before ready: %s", name, strings.Join(seen, "\n"))
			seen = append(seen, l)
			if strings.Contains(l, ready) {
				return cmd
			}
		case <-timeout:
			require.FailNow(t, name+" not ready", strings.Join(seen, "\n"))
		}
	}
}

// freePort is a loopback port free when asked.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// stopProcess kills a server of the test's own and waits for its exit.
func stopProcess(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Kill())
	// startProcess's reader waits for it.
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
