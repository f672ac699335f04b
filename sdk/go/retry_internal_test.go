package hookd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"0", 0, true},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true}, // a date passed: no wait
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	} {
		got, ok := retryAfter(tc.value, now)
		require.Equal(t, tc.ok, ok, "%q", tc.value)
		require.Equal(t, tc.want, got, "%q", tc.value)
	}
}

func TestBackoffIsBoundedAndGrows(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}.normalized()
	for n := 1; n < 70; n++ {
		ceiling := p.MaxBackoff
		if n <= 4 {
			ceiling = p.MinBackoff << (n - 1) // 100, 200, 400, 800 ms
		}
		for range 50 {
			d := p.backoff(n)
			require.Greater(t, d, time.Duration(0))
			require.LessOrEqual(t, d, ceiling, "retry %d", n)
		}
	}
}

// doerSetup is a retryingDoer against a test server whose handler answers
// each try in turn, and the waits the doer asked for.
type doerSetup struct {
	doer  *retryingDoer
	url   string
	mu    sync.Mutex
	tries int
	waits []time.Duration
}

func setupDoer(t *testing.T, p RetryPolicy, answer func(try int, w http.ResponseWriter, r *http.Request)) *doerSetup {
	t.Helper()
	s := &doerSetup{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.tries++
		n := s.tries
		s.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.doer = &retryingDoer{client: srv.Client(), policy: p.normalized(), sleep: func(ctx context.Context, d time.Duration) error {
		s.mu.Lock()
		s.waits = append(s.waits, d)
		s.mu.Unlock()
		return ctx.Err()
	}}
	return s
}

// count is how many tries the server got.
func (s *doerSetup) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries
}

func (s *doerSetup) do(t *testing.T, ctx context.Context, method, body string) (*http.Response, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url, rd)
	require.NoError(t, err)
	return s.doer.Do(req)
}

func TestDoerRetriesRefusalsWithTheirRetryAfter(t *testing.T) {
	t.Parallel()
	bodies := make(chan string, 3)
	s := setupDoer(t, DefaultRetryPolicy(), func(try int, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		switch try {
		case 1:
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusTooManyRequests) // no Retry-After: backoff
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	resp, err := s.do(t, context.Background(), http.MethodPost, `{"a":1}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 3, s.count())
	require.Equal(t, []string{`{"a":1}`, `{"a":1}`, `{"a":1}`}, []string{<-bodies, <-bodies, <-bodies}, "each try sends the whole body")
	require.Len(t, s.waits, 2)
	require.Equal(t, 3*time.Second, s.waits[0])
	require.LessOrEqual(t, s.waits[1], 2*DefaultRetryPolicy().MinBackoff, "the second retry's backoff")
}

func TestDoerStopsAtMaxAttemptsAndAtTheDeadline(t *testing.T) {
	t.Parallel()
	refuse := func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	p := DefaultRetryPolicy()
	p.MaxAttempts = 3
	s := setupDoer(t, p, refuse)
	resp, err := s.do(t, context.Background(), http.MethodGet, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the last refusal is the answer")
	require.Equal(t, 3, s.count())

	// A wait past the context's deadline is not started.
	s = setupDoer(t, DefaultRetryPolicy(), refuse)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err = s.do(t, ctx, http.MethodGet, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, 1, s.count())
	require.Empty(t, s.waits)

	// Nor one over MaxRetryAfter.
	p = DefaultRetryPolicy()
	p.MaxRetryAfter = 5 * time.Second
	s = setupDoer(t, p, refuse)
	resp, err = s.do(t, context.Background(), http.MethodGet, "")
	require.NoError(t, err)
	require.Equal(t, 1, s.count())
	require.NoError(t, resp.Body.Close())
}

func TestDoerRepeatsOnlyRepeatableRequestsAfterTransportErrors(t *testing.T) {
	t.Parallel()
	// The server hangs up on the first try of every request.
	hangUp := func(try int, w http.ResponseWriter, _ *http.Request) {
		if try == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	for _, tc := range []struct {
		name       string
		method     string
		idempotent bool
		tries      int
	}{
		{"GET", http.MethodGet, false, 2},
		{"DELETE", http.MethodDelete, false, 2},
		{"POST", http.MethodPost, false, 1},
		{"POST with an idempotency key", http.MethodPost, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setupDoer(t, DefaultRetryPolicy(), hangUp)
			ctx := context.Background()
			if tc.idempotent {
				ctx = withIdempotent(ctx)
			}
			resp, err := s.do(t, ctx, tc.method, `{}`)
			if tc.tries == 1 {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.NoError(t, resp.Body.Close())
			}
			require.Equal(t, tc.tries, s.count())
		})
	}
}

func TestDoerAttemptTimeoutRetriesAndCancelledContextStops(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	p := DefaultRetryPolicy()
	p.AttemptTimeout = 200 * time.Millisecond
	s := setupDoer(t, p, func(try int, w http.ResponseWriter, r *http.Request) {
		// The server sees the client hang up once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		if try == 1 {
			select { // hold the first try until the client gives up
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	t.Cleanup(func() { close(release) }) // before the server's Close
	resp, err := s.do(t, withIdempotent(context.Background()), http.MethodPost, `{}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 2, s.count())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.do(t, ctx, http.MethodGet, "")
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}
