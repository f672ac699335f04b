package deliverytest_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Started by an import's init function (the Pub/Sub client's,
		// through internal/destination), not by a test.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// testNow is the injected receiver clock, and the signing time of requests.
var testNow = time.Unix(1_750_000_000, 0)

func fixedNow() time.Time { return testNow }

func secret(b byte) string {
	return delivery.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32))
}

func parse(t *testing.T, s string) delivery.Secret {
	t.Helper()
	out, err := delivery.ParseSecret(s)
	require.NoError(t, err)
	return out
}

// webhook is one request a test sends.
type webhook struct {
	path    string
	msgID   string
	body    string
	ts      time.Time
	secrets []delivery.Secret // none: unsigned
	signed  *string           // the body to sign when not body, to tamper
	headers map[string]string // set after signing, to tamper
}

// client returns an HTTP client with its own transport, closed with the test.
func client(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// send posts wh to rc and returns the status and body, or the client's error.
func send(ctx context.Context, c *http.Client, rc *deliverytest.Receiver, wh webhook) (int, string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rc.URL(wh.path), bytes.NewReader([]byte(wh.body)))
	if err != nil {
		return 0, "", nil, fmt.Errorf("new request: %w", err)
	}
	ts := wh.ts
	if ts.IsZero() {
		ts = testNow
	}
	req.Header.Set("webhook-id", wh.msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	if len(wh.secrets) > 0 {
		signed := wh.body
		if wh.signed != nil {
			signed = *wh.signed
		}
		req.Header.Set("webhook-signature", delivery.Sign(wh.msgID, ts, []byte(signed), wh.secrets...))
	}
	for k, v := range wh.headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err // unwrapped: tests classify the client's error
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", nil, err // unwrapped: tests classify the body read's error
	}
	return resp.StatusCode, string(body), resp.Header, nil
}

func TestReceiverCountsPerPath(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seqs = map[string][]int{}
	)
	rc := deliverytest.Start(t, deliverytest.Options{
		Respond: func(r *deliverytest.Request) deliverytest.Response {
			mu.Lock()
			seqs[r.Path] = append(seqs[r.Path], r.Seq)
			mu.Unlock()
			return deliverytest.Response{Status: http.StatusNoContent}
		},
	})
	c := client(t, 5*time.Second)

	for i := range 3 {
		status, _, _, err := send(t.Context(), c, rc, webhook{path: "/a", msgID: fmt.Sprint("msg_a", i)})
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, status)
	}
	status, _, _, err := send(t.Context(), c, rc, webhook{path: "b", msgID: "msg_b"})
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)

	tests := []struct {
		path string
		want deliverytest.Stats
		seqs []int
	}{
		{"/a", deliverytest.Stats{Requests: 3, Delivered: 3, DistinctDelivered: 3, MaxInFlight: 1}, []int{1, 2, 3}},
		{"/b", deliverytest.Stats{Requests: 1, Delivered: 1, DistinctDelivered: 1, MaxInFlight: 1}, []int{1}},
		{"/never", deliverytest.Stats{}, nil},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, rc.Stats(tt.path), tt.path)
		mu.Lock()
		require.Equal(t, tt.seqs, seqs[tt.path], tt.path)
		mu.Unlock()
	}
	require.Equal(t, map[string]int{"msg_a0": 1, "msg_a1": 1, "msg_a2": 1}, rc.DeliveredIDs("/a"))
	require.Empty(t, rc.DeliveredIDs("/never"))
}

func TestReceiverDefaultAnswerAndResponsePassThrough(t *testing.T) {
	t.Parallel()
	rc := deliverytest.Start(t, deliverytest.Options{
		Respond: func(r *deliverytest.Request) deliverytest.Response {
			if r.Path == "/default" {
				return deliverytest.Response{}
			}
			return deliverytest.Response{
				Status: http.StatusTooManyRequests,
				Body:   []byte("slow down"),
				Header: http.Header{"Retry-After": {"120"}},
			}
		},
	})
	plain := deliverytest.Start(t, deliverytest.Options{})
	c := client(t, 5*time.Second)

	status, body, _, err := send(t.Context(), c, plain, webhook{path: "/x", msgID: "m"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ok", body)

	status, body, _, err = send(t.Context(), c, rc, webhook{path: "/default", msgID: "m"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "status 0 means 200")
	require.Empty(t, body)

	status, body, header, err := send(t.Context(), c, rc, webhook{path: "/limited", msgID: "m"})
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "slow down", body)
	require.Equal(t, "120", header.Get("Retry-After"))
	require.Equal(t, deliverytest.Stats{Requests: 1, MaxInFlight: 1}, rc.Stats("/limited"), "a 429 is not a delivery")
}

func TestReceiverDuplicates(t *testing.T) {
	t.Parallel()
	// The first attempt of msg_c fails, so its one 2xx is not a duplicate.
	rc := deliverytest.Start(t, deliverytest.Options{
		Respond: func(r *deliverytest.Request) deliverytest.Response {
			if r.MsgID == "msg_c" && r.Seq == 5 {
				return deliverytest.Response{Status: http.StatusServiceUnavailable}
			}
			return deliverytest.Response{Status: http.StatusOK}
		},
	})
	c := client(t, 5*time.Second)

	for _, id := range []string{"msg_a", "msg_a", "msg_b", "msg_a", "msg_c", "msg_c", ""} {
		_, _, _, err := send(t.Context(), c, rc, webhook{path: "/d", msgID: id})
		require.NoError(t, err)
	}

	require.Equal(t, deliverytest.Stats{
		Requests:          7,
		Delivered:         6,
		DistinctDelivered: 3,
		Duplicates:        2,
		MaxInFlight:       1,
	}, rc.Stats("/d"))
	require.Equal(t, map[string]int{"msg_a": 3, "msg_b": 1, "msg_c": 1}, rc.DeliveredIDs("/d"))
}

func TestReceiverVerifiesSignatures(t *testing.T) {
	t.Parallel()
	current, previous, stranger := parse(t, secret(1)), parse(t, secret(2)), parse(t, secret(3))
	var responded atomic.Int32
	rc := deliverytest.Start(t, deliverytest.Options{
		Secrets: []string{current.Reveal(), previous.Reveal()},
		Now:     fixedNow,
		Respond: func(*deliverytest.Request) deliverytest.Response {
			responded.Add(1)
			return deliverytest.Response{}
		},
	})
	c := client(t, 5*time.Second)

	tests := []struct {
		name     string
		wh       webhook
		wantCode int
	}{
		{"current secret", webhook{secrets: []delivery.Secret{current}}, http.StatusOK},
		{"previous secret", webhook{secrets: []delivery.Secret{previous}}, http.StatusOK},
		{"rotation: stranger then current", webhook{secrets: []delivery.Secret{stranger, current}}, http.StatusOK},
		{"within tolerance", webhook{secrets: []delivery.Secret{current}, ts: testNow.Add(-deliverytest.SignatureTolerance)}, http.StatusOK},
		{"unknown secret", webhook{secrets: []delivery.Secret{stranger}}, http.StatusBadRequest},
		{"unsigned", webhook{}, http.StatusBadRequest},
		{"tampered body", webhook{secrets: []delivery.Secret{current}, signed: new(`{"type":"invoice.void"}`)}, http.StatusBadRequest},
		{"tampered id", webhook{secrets: []delivery.Secret{current}, headers: map[string]string{"webhook-id": "msg_other"}}, http.StatusBadRequest},
		{"too old", webhook{secrets: []delivery.Secret{current}, ts: testNow.Add(-deliverytest.SignatureTolerance - time.Second)}, http.StatusBadRequest},
		{"bad timestamp", webhook{secrets: []delivery.Secret{current}, headers: map[string]string{"webhook-timestamp": "yesterday"}}, http.StatusBadRequest},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wh := tt.wh
			wh.path = "/" + strconv.Itoa(i)
			wh.msgID = "msg_" + strconv.Itoa(i)
			wh.body = `{"type":"invoice.paid"}`

			status, _, _, err := send(t.Context(), c, rc, wh)

			require.NoError(t, err)
			require.Equal(t, tt.wantCode, status)
			st := rc.Stats(wh.path)
			require.Equal(t, 1, st.Requests)
			if tt.wantCode == http.StatusOK {
				require.Equal(t, 0, st.BadSignatures)
				require.Equal(t, 1, st.Delivered)
			} else {
				require.Equal(t, 1, st.BadSignatures)
				require.Equal(t, 0, st.Delivered)
			}
		})
	}
	t.Cleanup(func() {
		require.Equal(t, int32(4), responded.Load(), "Respond only sees verified requests")
	})

}

func TestReceiverRejectsBadSecrets(t *testing.T) {
	t.Parallel()
	_, err := deliverytest.NewReceiver(deliverytest.Options{Secrets: []string{secret(1), "whsec_short"}})
	require.ErrorContains(t, err, "new receiver: secret 1: parse secret")
}

func TestReceiverMaxInFlight(t *testing.T) {
	t.Parallel()
	const clients = 8
	release := make(chan struct{})
	rc := deliverytest.Start(t, deliverytest.Options{
		Respond: func(*deliverytest.Request) deliverytest.Response {
			<-release
			return deliverytest.Response{}
		},
	})
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll) // runs before the receiver closes, even on failure
	c := client(t, 10*time.Second)

	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			_, _, _, err := send(t.Context(), c, rc, webhook{path: "/busy", msgID: fmt.Sprint("msg_", i)})
			errs <- err
		})
	}
	require.Eventually(t, func() bool { return rc.Stats("/busy").InFlight == clients },
		5*time.Second, time.Millisecond)
	releaseAll()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	require.Equal(t, deliverytest.Stats{
		Requests:          clients,
		Delivered:         clients,
		DistinctDelivered: clients,
		InFlight:          0,
		MaxInFlight:       clients,
	}, rc.Stats("/busy"))
}

func TestReceiverHangRespectsClientTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp deliverytest.Response
	}{
		{"hang", deliverytest.Response{Hang: true}},
		{"long delay", deliverytest.Response{Delay: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := deliverytest.Start(t, deliverytest.Options{
				Respond: func(*deliverytest.Request) deliverytest.Response { return tt.resp },
			})
			c := client(t, 100*time.Millisecond)

			start := time.Now()
			_, _, _, err := send(t.Context(), c, rc, webhook{path: "/slow", msgID: "m"})

			require.Error(t, err)
			require.Equal(t, delivery.ErrTimeout, delivery.ErrorClassOf(err), "%v", err)
			require.Less(t, time.Since(start), 5*time.Second)
			require.Eventually(t, func() bool { return rc.Stats("/slow").InFlight == 0 },
				5*time.Second, time.Millisecond, "the handler gives up with the client")
			require.Equal(t, 0, rc.Stats("/slow").Delivered)
		})
	}
}

func TestReceiverDelayThenAnswer(t *testing.T) {
	t.Parallel()
	rc := deliverytest.Start(t, deliverytest.Options{
		Respond: func(*deliverytest.Request) deliverytest.Response {
			return deliverytest.Response{Delay: 50 * time.Millisecond, Status: http.StatusAccepted}
		},
	})
	c := client(t, 5*time.Second)

	start := time.Now()
	status, _, _, err := send(t.Context(), c, rc, webhook{path: "/delayed", msgID: "m"})

	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	require.Equal(t, 1, rc.Stats("/delayed").Delivered)
}

func TestReceiverCloseConn(t *testing.T) {
	t.Parallel()
	rc := deliverytest.Start(t, deliverytest.Options{
		Respond: func(*deliverytest.Request) deliverytest.Response {
			return deliverytest.Response{CloseConn: true}
		},
	})
	c := client(t, 5*time.Second)

	_, _, _, err := send(t.Context(), c, rc, webhook{path: "/drop", msgID: "m"})

	require.Error(t, err)
	require.Equal(t, delivery.ErrEOF, delivery.ErrorClassOf(err), "%v", err)
	require.Equal(t, deliverytest.Stats{Requests: 1, MaxInFlight: 1}, rc.Stats("/drop"))
}

func TestReceiverCutBody(t *testing.T) {
	t.Parallel()
	rc := deliverytest.Start(t, deliverytest.Options{
		Respond: func(*deliverytest.Request) deliverytest.Response {
			return deliverytest.Response{Status: http.StatusOK, Body: bytes.Repeat([]byte("x"), 1<<20), CutBody: true}
		},
	})
	c := client(t, 5*time.Second)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, rc.URL("/cut"), nil)
	require.NoError(t, err)
	req.Header.Set("webhook-id", "m")

	resp, err := c.Do(req)
	require.NoError(t, err, "the status and headers arrive")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 1<<20, resp.ContentLength)
	body, err := io.ReadAll(resp.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the body ends early")
	require.Len(t, body, 1<<19)
	require.Equal(t, deliverytest.Stats{Requests: 1, Delivered: 1, DistinctDelivered: 1, MaxInFlight: 1}, rc.Stats("/cut"))
}

func TestReceiverCloseEndsHangingRequests(t *testing.T) {
	t.Parallel()
	rc, err := deliverytest.NewReceiver(deliverytest.Options{
		Respond: func(*deliverytest.Request) deliverytest.Response { return deliverytest.Response{Hang: true} },
	})
	require.NoError(t, err)
	c := client(t, time.Minute)

	errs := make(chan error, 1)
	go func() {
		_, _, _, err := send(context.Background(), c, rc, webhook{path: "/hang", msgID: "m"})
		errs <- err
	}()
	require.Eventually(t, func() bool { return rc.Stats("/hang").InFlight == 1 }, 5*time.Second, time.Millisecond)

	start := time.Now()
	require.NoError(t, rc.Close())
	require.Less(t, time.Since(start), 2*time.Second)
	require.NoError(t, rc.Close(), "Close is idempotent")
	select {
	case err := <-errs:
		require.Error(t, err, "a hang ended by Close is never answered")
		require.Equal(t, delivery.ErrEOF, delivery.ErrorClassOf(err), "%v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("client still waiting after Close")
	}
	require.Equal(t, 0, rc.Stats("/hang").InFlight)
}

func BenchmarkReceiver(b *testing.B) {
	s := secret(9)
	rc := deliverytest.Start(b, deliverytest.Options{Secrets: []string{s}})
	parsed, err := delivery.ParseSecret(s)
	require.NoError(b, err)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	body := bytes.Repeat([]byte("x"), 512)
	var n atomic.Int64

	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "msg_" + strconv.FormatInt(n.Add(1), 10)
			now := time.Now()
			req, err := http.NewRequest(http.MethodPost, rc.URL("/bench"), bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header.Set("webhook-id", id)
			req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
			req.Header.Set("webhook-signature", delivery.Sign(id, now, body, parsed))
			resp, err := c.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
	b.StopTimer()
	require.Equal(b, 0, rc.Stats("/bench").BadSignatures)
}
