package hookd_test

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/webhook"
)

// newClient returns a client of the test's hookd (or of baseURL, when
// given), with retries quick enough for tests.
func newClient(t *testing.T, baseURL string, opts ...hookd.Option) *hookd.Client {
	t.Helper()
	if baseURL == "" {
		baseURL = server.API
	}
	p := hookd.DefaultRetryPolicy()
	p.MinBackoff, p.MaxBackoff = 50*time.Millisecond, 500*time.Millisecond
	c, err := hookd.New(baseURL, server.Token, append([]hookd.Option{hookd.WithRetryPolicy(p)}, opts...)...)
	require.NoError(t, err)
	return c
}

// newSecret returns a whsec_ secret of 32 random bytes.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// receiver is a webhook receiver on 127.0.0.1 that verifies every webhook
// with the SDK's verifier and answers status (200 unless set).
type receiver struct {
	srv      *httptest.Server
	status   atomic.Int32
	mu       sync.Mutex
	verifier *webhook.Verifier
	verified map[string][]byte // webhook-id -> body
	rejected int
	got      chan string // webhook-ids of verified webhooks
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{verified: map[string][]byte{}, got: make(chan string, 100)}
	r.status.Store(http.StatusOK)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		v := r.verifier
		r.mu.Unlock()
		if v == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, err := v.VerifyRequest(req)
		if err != nil {
			r.mu.Lock()
			r.rejected++
			r.mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		status := int(r.status.Load())
		if status == http.StatusOK {
			id := req.Header.Get(webhook.HeaderID)
			r.mu.Lock()
			r.verified[id] = body
			r.mu.Unlock()
			select {
			case r.got <- id:
			default:
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// verifyWith sets the keys webhooks are verified with.
func (r *receiver) verifyWith(t *testing.T, keys ...string) {
	t.Helper()
	v, err := webhook.NewVerifier(keys)
	require.NoError(t, err)
	r.mu.Lock()
	r.verifier = v
	r.mu.Unlock()
}

func (r *receiver) url(path string) string { return r.srv.URL + path }

// waitVerified waits for a verified webhook of message id (its webhook-id)
// and returns its body.
func (r *receiver) waitVerified(t *testing.T, msgID string) []byte {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		r.mu.Lock()
		body, ok := r.verified[msgID]
		r.mu.Unlock()
		if ok {
			return body
		}
		select {
		case <-r.got:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("no verified webhook of %s within a minute (%d rejected)", msgID, r.rejected)
		}
	}
}

// faultProxy stands in front of hookd: fault answers a request itself
// when it returns true, else the request passes through.
type faultProxy struct {
	srv   *httptest.Server
	mu    sync.Mutex
	count map[string]int
}

func newFaultProxy(t *testing.T, fault func(n int, w http.ResponseWriter, r *http.Request, pass http.Handler) bool) *faultProxy {
	t.Helper()
	target, err := url.Parse(server.API)
	require.NoError(t, err)
	pass := httputil.NewSingleHostReverseProxy(target)
	p := &faultProxy{count: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		p.mu.Lock()
		p.count[key]++
		n := p.count[key]
		p.mu.Unlock()
		if fault(n, w, r, pass) {
			return
		}
		pass.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *faultProxy) requests(method, path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[method+" "+path]
}
