package delivery

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"
)

// MaxResponseExcerpt caps the response body kept with an attempt.
const MaxResponseExcerpt = 4096

// maxDrain is how much more of a response body is read (and discarded) so
// the connection can be reused.
const maxDrain = 64 << 10

// UserAgent is sent with every delivery.
const UserAgent = "hookd/1"

// Sender POSTs signed webhooks.
type Sender struct {
	client     *http.Client
	timeout    time.Duration
	propagator propagation.TextMapPropagator
}

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Timeout bounds one attempt from dial to the last byte read.
	Timeout time.Duration
	// DialControl, when set, vets every dialed address (the SSRF guard).
	DialControl func(network, address string, c syscall.RawConn) error
	// Propagator, when set, writes the attempt's trace context into each
	// request (traceparent); nil sends none.
	Propagator propagation.TextMapPropagator
}

// NewSender returns a Sender with a transport sized for many endpoints and no
// redirect following (a 3xx is an answer, classified as a failure).
func NewSender(cfg SenderConfig) *Sender {
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
	if cfg.DialControl != nil {
		dialer.Control = cfg.DialControl
	}
	transport := &http.Transport{
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	return &Sender{
		timeout:    cfg.Timeout,
		propagator: cfg.Propagator,
		client: &http.Client{
			Transport: transport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// TimeoutOf is the timeout an attempt of r is given.
func (s *Sender) TimeoutOf(r Request) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return s.timeout
}

// CloseIdle closes idle connections.
func (s *Sender) CloseIdle() { s.client.CloseIdleConnections() }

// Request is one attempt to send.
type Request struct {
	URL       string
	MessageID string
	Timestamp time.Time
	Body      []byte
	Signature string
	// Headers are the endpoint's own headers; a reserved name among them is
	// skipped. Their values are never logged.
	Headers map[string]string
	// Timeout bounds this attempt instead of the sender's timeout (the
	// endpoint's own); zero uses the sender's.
	Timeout time.Duration
}

// Response is what came back: a status or a transport error class.
type Response struct {
	Status     int
	ErrorClass ErrorClass
	Err        error
	RetryAfter string
	Excerpt    string
	Duration   time.Duration
}

// Send makes one attempt. It never returns an error: a transport failure is
// described in the Response.
func (s *Sender) Send(ctx context.Context, r Request, since func(time.Time) time.Duration, start time.Time) Response {
	ctx, cancel := context.WithTimeout(ctx, s.TimeoutOf(r))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return Response{ErrorClass: ErrOther, Err: err, Duration: since(start)}
	}
	// An endpoint may replace the user agent, nothing else hookd sets.
	req.Header.Set("User-Agent", UserAgent)
	setEndpointHeaders(req.Header, r.Headers)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Id", r.MessageID)
	req.Header.Set("Webhook-Timestamp", strconv.FormatInt(r.Timestamp.Unix(), 10))
	req.Header.Set("Webhook-Signature", r.Signature)
	if s.propagator != nil {
		s.propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return Response{ErrorClass: ErrorClassOf(err), Err: err, Duration: since(start)}
	}
	defer resp.Body.Close()
	// The status settles the attempt; a body cut short afterwards does not
	// change it.
	head, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseExcerpt))
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	}
	return Response{
		Status:     resp.StatusCode,
		RetryAfter: resp.Header.Get("Retry-After"),
		Excerpt:    Excerpt(head),
		Duration:   since(start),
	}
}

// Excerpt turns up to MaxResponseExcerpt bytes of a body into text Postgres
// can store: valid UTF-8, no NUL bytes, never longer than the cap.
func Excerpt(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= MaxResponseExcerpt {
		return s
	}
	cut := MaxResponseExcerpt
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
