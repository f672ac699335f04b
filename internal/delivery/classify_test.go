package delivery_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

var allClassifications = []delivery.Classification{
	delivery.ClassSuccess,
	delivery.ClassFailure,
	delivery.ClassIgnore,
	delivery.ClassAuthFailure,
	delivery.ClassBlocked,
}

var transportClasses = []delivery.ErrorClass{
	delivery.ErrTimeout,
	delivery.ErrConnRefused,
	delivery.ErrConnReset,
	delivery.ErrDNS,
	delivery.ErrTLS,
	delivery.ErrEOF,
	delivery.ErrOther,
}

func TestClassifyStatus(t *testing.T) {
	t.Parallel()

	tests := []struct {
		status int
		want   delivery.Classification
	}{
		{100, delivery.ClassFailure},
		{200, delivery.ClassSuccess},
		{204, delivery.ClassSuccess},
		{299, delivery.ClassSuccess},
		{301, delivery.ClassFailure},
		{302, delivery.ClassFailure},
		{304, delivery.ClassFailure},
		{400, delivery.ClassIgnore},
		{401, delivery.ClassAuthFailure},
		{403, delivery.ClassAuthFailure},
		{404, delivery.ClassIgnore}, // up and rejecting this payload: not ill health
		{409, delivery.ClassIgnore},
		{410, delivery.ClassIgnore},
		{422, delivery.ClassIgnore},
		{429, delivery.ClassIgnore}, // a slow-down instruction, not ill health
		{500, delivery.ClassFailure},
		{502, delivery.ClassFailure},
		{503, delivery.ClassFailure}, // 5xx: the endpoint is unwell
		{504, delivery.ClassFailure},
		{599, delivery.ClassFailure},
		{0, delivery.ClassFailure},
		{-1, delivery.ClassFailure},
		{199, delivery.ClassFailure},
		{300, delivery.ClassFailure},
		{499, delivery.ClassIgnore},
		{600, delivery.ClassFailure},
		{999, delivery.ClassFailure},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, delivery.Classify(tt.status, delivery.ErrNone))
		})
	}
}

func TestClassifyTransportError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		status int
		ec     delivery.ErrorClass
		want   delivery.Classification
	}{
		// The endpoint could not even accept the request: the strongest signal.
		{"connect error", 0, delivery.ErrConnRefused, delivery.ClassFailure},
		{"timeout", 0, delivery.ErrTimeout, delivery.ClassFailure},
		{"reset", 0, delivery.ErrConnReset, delivery.ClassFailure},
		{"dns", 0, delivery.ErrDNS, delivery.ClassFailure},
		{"tls", 0, delivery.ErrTLS, delivery.ClassFailure},
		{"eof", 0, delivery.ErrEOF, delivery.ClassFailure},
		{"other", 0, delivery.ErrOther, delivery.ClassFailure},
		{"blocked", 0, delivery.ErrBlocked, delivery.ClassBlocked},
		// A body read can fail after the status line arrived: the error wins.
		{"eof after 200", 200, delivery.ErrEOF, delivery.ClassFailure},
		{"timeout after 404", 404, delivery.ErrTimeout, delivery.ClassFailure},
		{"blocked with status", 200, delivery.ErrBlocked, delivery.ClassBlocked},
		{"unknown class", 200, delivery.ErrorClass("bogus"), delivery.ClassFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, delivery.Classify(tt.status, tt.ec))
		})
	}
}

func TestBreakerOutcome(t *testing.T) {
	t.Parallel()

	tests := []struct {
		class   delivery.Classification
		want    string
		wantOK  bool
		comment string
	}{
		{delivery.ClassSuccess, "success", true, ""},
		{delivery.ClassFailure, "failure", true, ""},
		{delivery.ClassIgnore, "ignore", true, ""},
		{delivery.ClassAuthFailure, "auth_failure", true, ""},
		{delivery.ClassBlocked, "", false, "blocked never feeds the breaker"},
		{delivery.Classification("bogus"), "", false, "unknown values never feed the breaker"},
	}
	for _, tt := range tests {
		t.Run(string(tt.class), func(t *testing.T) {
			t.Parallel()
			got, ok := tt.class.BreakerOutcome()
			require.Equal(t, tt.wantOK, ok, tt.comment)
			require.Equal(t, tt.want, got)
		})
	}
}

// timeoutErr is a net.Error whose Timeout() is true.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestErrorClassOfWrapped(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		err  error
		want delivery.ErrorClass
	}{
		{"nil", nil, delivery.ErrNone},
		{"blocked", fmt.Errorf("dial 10.0.0.1:443: %w", delivery.ErrBlockedTarget), delivery.ErrBlocked},
		{"blocked in op error", &net.OpError{Op: "dial", Net: "tcp", Err: delivery.ErrBlockedTarget}, delivery.ErrBlocked},
		{"deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), delivery.ErrTimeout},
		{"net timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, delivery.ErrTimeout},
		{"os deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), delivery.ErrTimeout},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, delivery.ErrConnRefused},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, delivery.ErrConnReset},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, delivery.ErrConnReset},
		{"dns", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}, delivery.ErrDNS},
		{"dns timeout", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", Name: "x.example", IsTimeout: true}}, delivery.ErrDNS},
		{"scheme mismatch", fmt.Errorf("post: %w", http.ErrSchemeMismatch), delivery.ErrTLS},
		{"record header", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, delivery.ErrTLS},
		{"alert", fmt.Errorf("handshake: %w", tls.AlertError(40)), delivery.ErrTLS},
		{"remote alert", &net.OpError{Op: "remote error", Err: errors.New("tls: handshake failure")}, delivery.ErrTLS},
		{"verification", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, delivery.ErrTLS},
		{"unknown authority", x509.UnknownAuthorityError{}, delivery.ErrTLS},
		{"hostname", x509.HostnameError{Host: "example.com", Certificate: &x509.Certificate{}}, delivery.ErrTLS},
		{"invalid cert", x509.CertificateInvalidError{Reason: x509.Expired, Cert: &x509.Certificate{}}, delivery.ErrTLS},
		{"system roots", x509.SystemRootsError{}, delivery.ErrTLS},
		{"eof", fmt.Errorf("read body: %w", io.EOF), delivery.ErrEOF},
		{"unexpected eof", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), delivery.ErrEOF},
		{"canceled", fmt.Errorf("post: %w", context.Canceled), delivery.ErrOther},
		{"other", errors.New("unsupported protocol scheme"), delivery.ErrOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, delivery.ErrorClassOf(tt.err), "%v", tt.err)
		})
	}
}

// rawServer is a plain TCP listener on 127.0.0.1 that hands every accepted
// connection to handle. It lets a test produce transport failures that a real
// HTTP server would never produce on purpose.
func rawServer(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readRequest reads one HTTP request, body included, from c.
func readRequest(c net.Conn) error {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	_, err = io.Copy(io.Discard, req.Body)
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	return nil
}

// newClient returns a client with its own transport whose idle connections are
// closed when the test ends.
func newClient(t *testing.T, timeout time.Duration, tlsConfig *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// post sends a small POST and reads the whole answer, returning the first
// error from Do or from the body read.
func post(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"type":"t"}`))
	if err != nil {
		return fmt.Errorf("new request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err // unwrapped: the test classifies the client's own error
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err // unwrapped: the test classifies the body read's own error
	}
	return nil
}

// discardLogger silences a test server's error log (failed handshakes are the
// point of some tests).
func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func TestErrorClassOfRealErrors(t *testing.T) {
	t.Parallel()

	closedPort := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		return "http://" + addr + "/hook"
	}
	hanging := func(t *testing.T) string {
		return "http://" + rawServer(t, func(c net.Conn) {
			_ = readRequest(c)
			_, _ = io.Copy(io.Discard, c) // hold the connection until the client gives up
		}) + "/hook"
	}
	closeBeforeAnswer := func(t *testing.T) string {
		return "http://" + rawServer(t, func(c net.Conn) {
			_ = readRequest(c)
		}) + "/hook"
	}
	closeMidBody := func(t *testing.T) string {
		return "http://" + rawServer(t, func(c net.Conn) {
			_ = readRequest(c)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part of it")
		}) + "/hook"
	}
	reset := func(t *testing.T) string {
		return "http://" + rawServer(t, func(c net.Conn) {
			_ = readRequest(c)
			_ = c.(*net.TCPConn).SetLinger(0) // Close now sends RST instead of FIN
		}) + "/hook"
	}
	plainHTTPForTLS := func(t *testing.T) string {
		return "https://" + rawServer(t, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\n")
		}) + "/hook"
	}
	plainTCPForTLS := func(t *testing.T) string {
		return "https://" + rawServer(t, func(c net.Conn) {
			_, _ = io.WriteString(c, "220 smtp.example ESMTP ready\r\n")
		}) + "/hook"
	}
	untrustedCert := func(t *testing.T) string {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		srv.Config.ErrorLog = discardLogger()
		t.Cleanup(srv.Close)
		return srv.URL + "/hook"
	}
	unresolvable := func(*testing.T) string { return "http://hookd-test.invalid/hook" }

	tests := []struct {
		name    string
		url     func(t *testing.T) string
		timeout time.Duration
		ctxTTL  time.Duration
		dial    func(ctx context.Context, network, addr string) (net.Conn, error)
		want    delivery.ErrorClass
	}{
		{name: "closed port", url: closedPort, want: delivery.ErrConnRefused},
		{name: "client timeout", url: hanging, timeout: 100 * time.Millisecond, want: delivery.ErrTimeout},
		{name: "context deadline", url: hanging, ctxTTL: 100 * time.Millisecond, want: delivery.ErrTimeout},
		{name: "closed before answering", url: closeBeforeAnswer, want: delivery.ErrEOF},
		{name: "closed mid body", url: closeMidBody, want: delivery.ErrEOF},
		{name: "reset", url: reset, want: delivery.ErrConnReset},
		{name: "tls to plain http", url: plainHTTPForTLS, want: delivery.ErrTLS},
		{name: "tls to plain tcp", url: plainTCPForTLS, want: delivery.ErrTLS},
		{name: "untrusted certificate", url: untrustedCert, want: delivery.ErrTLS},
		{name: "unresolvable host", url: unresolvable, want: delivery.ErrDNS},
		{
			name: "blocked by dialer",
			url:  closedPort,
			dial: func(_ context.Context, _, addr string) (net.Conn, error) {
				return nil, fmt.Errorf("dial %s: %w", addr, delivery.ErrBlockedTarget)
			},
			want: delivery.ErrBlocked,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			c := newClient(t, timeout, nil)
			if tt.dial != nil {
				c.Transport.(*http.Transport).DialContext = tt.dial
			}
			ctx := t.Context()
			if tt.ctxTTL > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTTL)
				defer cancel()
			}

			err := post(ctx, c, tt.url(t))

			require.Error(t, err)
			require.Equal(t, tt.want, delivery.ErrorClassOf(err), "%v", err)
			require.NotEqual(t, delivery.ClassSuccess, delivery.Classify(200, delivery.ErrorClassOf(err)))
		})
	}
}

func FuzzClassify(f *testing.F) {
	for _, s := range []int{0, 100, 200, 204, 299, 301, 401, 403, 404, 410, 429, 500, 503, 599, 1000, -1} {
		f.Add(s, "")
	}
	for _, ec := range transportClasses {
		f.Add(0, string(ec))
	}
	f.Add(200, "blocked")

	f.Fuzz(func(t *testing.T, status int, ec string) {
		got := delivery.Classify(status, delivery.ErrorClass(ec))
		require.Contains(t, allClassifications, got)
		if ec == "" && status >= 200 && status <= 299 {
			require.Equal(t, delivery.ClassSuccess, got)
		}
		if ec != "" && got == delivery.ClassSuccess {
			t.Fatalf("transport error %q classified as success", ec)
		}
		_, ok := got.BreakerOutcome()
		require.Equal(t, got != delivery.ClassBlocked, ok)
	})
}
