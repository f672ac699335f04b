package hookd

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy says how a call is retried. A call is tried again after a
// 429 or 503 answer (the API refused it before acting on it), and after a
// transport error (no answer, or none within AttemptTimeout) when the
// request is safe to repeat: GET, PUT, DELETE and Messages.Send, whose
// idempotency key makes a repeat store nothing new. Other requests (a
// POST that creates an endpoint, say) are not repeated after a transport
// error, since the first may have been carried out.
type RetryPolicy struct {
	// MaxAttempts is how many times a call is tried at most, the first
	// included; 1 never retries.
	MaxAttempts int
	// AttemptTimeout bounds each attempt, reading the answer included;
	// zero leaves attempts bounded by the call's context alone.
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry when the
	// answer asks for none: the n-th retry waits a random time up to
	// MinBackoff·2ⁿ⁻¹, at most MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// MaxRetryAfter caps a wait a Retry-After header asks for; a longer
	// one ends the retries and returns the answer's error.
	MaxRetryAfter time.Duration
}

// DefaultRetryPolicy tries a call up to 5 times, 30 seconds each, waiting
// up to 0.5 s, 1 s, 2 s and 4 s between tries (or what Retry-After asks,
// up to a minute).
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 5, AttemptTimeout: 30 * time.Second, MinBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second, MaxRetryAfter: time.Minute}
}

func (p RetryPolicy) normalized() RetryPolicy {
	if p.MaxAttempts < 1 {
		p.MaxAttempts = 1
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = 100 * time.Millisecond
	}
	if p.MaxBackoff < p.MinBackoff {
		p.MaxBackoff = p.MinBackoff
	}
	return p
}

// backoff is the wait before retry n (1 for the first retry): full jitter
// over an exponentially growing ceiling.
func (p RetryPolicy) backoff(n int) time.Duration {
	ceiling := p.MinBackoff
	for i := 1; i < n && ceiling < p.MaxBackoff; i++ {
		if ceiling > p.MaxBackoff/2 {
			ceiling = p.MaxBackoff
			break
		}
		ceiling *= 2
	}
	ceiling = min(ceiling, p.MaxBackoff)
	return time.Duration(rand.Int64N(int64(ceiling)) + 1)
}

// idempotentKey marks a request context whose request may be repeated
// after a transport error although its method is POST.
type idempotentKey struct{}

func withIdempotent(ctx context.Context) context.Context {
	return context.WithValue(ctx, idempotentKey{}, true)
}

func repeatable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	marked, _ := req.Context().Value(idempotentKey{}).(bool)
	return marked
}

// retryingDoer sends a request with the policy's retries; the generated
// client sends every request through it.
type retryingDoer struct {
	client *http.Client
	policy RetryPolicy
	sleep  func(context.Context, time.Duration) error
}

func (d *retryingDoer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for attempt := 1; ; attempt++ {
		resp, err := d.attempt(ctx, req, attempt)
		last := attempt >= d.policy.MaxAttempts
		var wait time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil || last || !repeatable(req) {
				return nil, err
			}
			wait = d.policy.backoff(attempt)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			if last {
				return resp, nil
			}
			asked, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now())
			if !ok {
				asked = d.policy.backoff(attempt)
			}
			if asked > d.policy.MaxRetryAfter || !fitsDeadline(ctx, asked) {
				return resp, nil
			}
			wait = asked
			// The answer is dropped: drain it so the connection is reused.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		default:
			return resp, nil
		}
		if err := d.sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// attempt sends one try of req; a try after the first sends the body
// again from req.GetBody.
func (d *retryingDoer) attempt(ctx context.Context, req *http.Request, n int) (*http.Response, error) {
	try := req
	if n > 1 && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, errors.New("hookd: the request body cannot be sent again")
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		try = req.Clone(ctx)
		try.Body = body
	}
	if d.policy.AttemptTimeout <= 0 {
		return d.client.Do(try)
	}
	actx, cancel := context.WithTimeout(ctx, d.policy.AttemptTimeout)
	resp, err := d.client.Do(try.WithContext(actx))
	if err != nil {
		cancel()
		return nil, err
	}
	// The attempt's deadline covers reading the body too; closing the
	// body releases it.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// retryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (RFC 9110, section 10.2.3), relative to now.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// fitsDeadline reports whether waiting d leaves the context's deadline
// ahead.
func fitsDeadline(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > d
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
