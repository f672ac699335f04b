// Package e2e runs hookd as real processes for end-to-end tests: it builds
// the api and dispatcher binaries once per test binary, starts them against
// a test database with the environment a test gives, captures their logs,
// and stops (or kills) them. The tests in this package exercise the whole
// service through its HTTP API and a receiver on 127.0.0.1.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/pgcluster"
)

var build struct {
	once    sync.Once
	dir     string
	release func() // retires the watchdog that removes dir if this binary dies
	err     error
}

// Binaries builds cmd/api and cmd/dispatcher once and returns their paths.
func Binaries(t testing.TB) (api, dispatcher string) {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "hookd-e2e-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.dir = dir
		if build.release, err = pgcluster.RemoveOnExit(dir); err != nil {
			build.err = err
			return
		}
		cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "github.com/hookd/hookd/cmd/api", "github.com/hookd/hookd/cmd/dispatcher")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatalf("e2e: %v", build.err)
	}
	return filepath.Join(build.dir, "api"), filepath.Join(build.dir, "dispatcher")
}

// CleanupBinaries removes the built binaries; call it from TestMain.
func CleanupBinaries() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	if build.release != nil {
		build.release()
	}
}

// Proc is one running hookd process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// Start runs binary with args and env (added to a minimal environment) and
// returns once the process printed a line matching ready.
func Start(t testing.TB, name, binary string, env map[string]string, ready *regexp.Regexp, args ...string) *Proc {
	t.Helper()
	return StartUnder(t, nil, name, binary, env, ready, args...)
}

// StartUnder is Start with the command run by wrap, a command that runs
// another in place (exec), such as `ip netns exec NAME` (Host.Exec); an
// empty wrap runs it directly.
func StartUnder(t testing.TB, wrap []string, name, binary string, env map[string]string, ready *regexp.Regexp, args ...string) *Proc {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), binary), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group, so a signal meant for the test binary's never
	// reaches it; killed with the test binary, so a run killed by its
	// timeout (which skips every cleanup) leaves no process behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Proc{Name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("e2e: start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- %s output (last 60 lines) ---\n%s", name, p.Tail(60))
		}
	})
	if ready != nil {
		p.waitReady(t, ready)
	}
	return p
}

// waitReady returns once the process printed a line matching ready.
func (p *Proc) waitReady(t testing.TB, ready *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ready.MatchString(p.Output()) {
		select {
		case <-p.done:
			t.Fatalf("e2e: %s exited before it was ready: %v\n%s", p.Name, p.err, p.Output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: %s not ready after 60s:\n%s", p.Name, p.Output())
		}
	}
}

// Output returns everything the process printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Tail returns the last n lines of output.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGTERM and waits up to timeout for a clean exit, returning the
// exit error.
func (p *Proc) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s", p.Name, timeout)
	}
}

// PID returns the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// RSS returns the process's resident set size from /proc/PID/status.
func (p *Proc) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		return 0, fmt.Errorf("read %s status: %w", p.Name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("parse %s VmRSS %q: %w", p.Name, rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s: no VmRSS in /proc/%d/status", p.Name, p.PID())
}

// Exited reports whether the process has ended.
// ExitErr is the process's exit error once it exited (nil before): read
// only after its end is known, so it never races the wait.
func (p *Proc) ExitErr() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var (
	listenRE     = regexp.MustCompile(`api listening on (http://\S+)`)
	apiMetricsRE = regexp.MustCompile(`api metrics on (http://\S+)/metrics`)
)

// API is a running api process and a client for it.
type API struct {
	*Proc
	URL        string
	MetricsURL string
	Token      string
	HTTP       *http.Client
}

// StartAPI starts the api on a free port against databaseURL. Receivers in
// these tests listen on 127.0.0.1, so ALLOW_PRIVATE_TARGETS is true, and
// tests post as fast as they can, so RATE_LIMIT is 0 (no limit), unless env
// says otherwise.
func StartAPI(t testing.TB, databaseURL string, env map[string]string) *API {
	t.Helper()
	apiBin, _ := Binaries(t)
	e := map[string]string{"DATABASE_URL": databaseURL, "API_TOKEN": "e2e-token", "LISTEN_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0", "DB_MAX_CONNS": "8",
		"ALLOW_PRIVATE_TARGETS": "true", "RATE_LIMIT": "0"}
	for k, v := range env {
		e[k] = v
	}
	p := Start(t, "api", apiBin, e, listenRE)
	out := p.Output()
	a := &API{Proc: p, URL: listenRE.FindStringSubmatch(out)[1], Token: e["API_TOKEN"], HTTP: &http.Client{Timeout: 30 * time.Second}}
	if m := apiMetricsRE.FindStringSubmatch(out); m != nil {
		a.MetricsURL = m[1]
	}
	return a
}

var metricsRE = regexp.MustCompile(`dispatcher metrics on (http://\S+)/metrics`)

// Dispatcher is a running dispatcher process.
type Dispatcher struct {
	*Proc
	MetricsURL string
	// RiverClient is its River client's ID, which River records in a
	// running job's attempted_by, and its fleet ID.
	RiverClient string
}

// StartDispatcher starts a dispatcher against databaseURL; it is ready once
// River has started. Like StartAPI, it allows private targets unless env
// sets ALLOW_PRIVATE_TARGETS.
func StartDispatcher(t testing.TB, name, databaseURL string, env map[string]string) *Dispatcher {
	t.Helper()
	return StartDispatchers(t, databaseURL, env, name)[0]
}

var (
	dispatcherReadyRE = regexp.MustCompile(`msg=dispatcher_started`)
	startedClientRE   = regexp.MustCompile(`msg=dispatcher_started .*river_client=(\S+)`)
)

// StartDispatchers starts one dispatcher of each name at once, as
// StartDispatcher does, and returns once every one is ready.
func StartDispatchers(t testing.TB, databaseURL string, env map[string]string, names ...string) []*Dispatcher {
	t.Helper()
	return startDispatchers(t, databaseURL, env, names, make([][]string, len(names)))
}

// StartDispatchersOn starts one dispatcher on each host, named
// "dispatcher@" and the host's address, as StartDispatchers does; its
// metrics listen on the host's own loopback.
func StartDispatchersOn(t testing.TB, databaseURL string, env map[string]string, hosts ...*Host) []*Dispatcher {
	t.Helper()
	names, wraps := make([]string, len(hosts)), make([][]string, len(hosts))
	for i, h := range hosts {
		names[i], wraps[i] = "dispatcher@"+h.Addr.String(), h.Exec()
	}
	return startDispatchers(t, databaseURL, env, names, wraps)
}

func startDispatchers(t testing.TB, databaseURL string, env map[string]string, names []string, wraps [][]string) []*Dispatcher {
	t.Helper()
	_, bin := Binaries(t)
	e := map[string]string{"DATABASE_URL": databaseURL, "METRICS_ADDR": "127.0.0.1:0", "DB_MAX_CONNS": "10", "NO_MIGRATE": "true",
		"ALLOW_PRIVATE_TARGETS": "true"}
	for k, v := range env {
		e[k] = v
	}
	procs := make([]*Proc, len(names))
	for i, name := range names {
		procs[i] = StartUnder(t, wraps[i], name, bin, e, nil)
	}
	out := make([]*Dispatcher, len(procs))
	for i, p := range procs {
		p.waitReady(t, dispatcherReadyRE)
		out[i] = &Dispatcher{Proc: p, MetricsURL: metricsRE.FindStringSubmatch(p.Output())[1]}
		if m := startedClientRE.FindStringSubmatch(p.Output()); m != nil {
			out[i].RiverClient = m[1]
		}
	}
	return out
}

// Do sends a JSON request to the API and decodes a JSON answer into out
// (when not nil), returning the status.
func (a *API) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s %s answer %q: %w", method, path, b, err)
		}
	}
	return resp.StatusCode, nil
}

// Endpoint is the API's endpoint shape, as far as tests need it.
type Endpoint struct {
	ID             string  `json:"id"`
	TenantID       string  `json:"tenant_id"`
	URL            string  `json:"url"`
	Status         string  `json:"status"`
	DisabledReason *string `json:"disabled_reason"`
	TrafficClass   string  `json:"traffic_class"`
}

// CreateEndpoint registers an endpoint and fails the test on error.
func (a *API) CreateEndpoint(t testing.TB, body map[string]any) Endpoint {
	t.Helper()
	var e Endpoint
	code, err := a.Do(context.Background(), "POST", "/v1/endpoints", body, &e)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create endpoint: %d %v", code, err)
	}
	return e
}

// Message is the API's message shape, as far as tests need it.
type Message struct {
	ID         string     `json:"id"`
	Deliveries []Delivery `json:"deliveries"`
}

// Delivery is the API's delivery shape, as far as tests need it.
type Delivery struct {
	ID               string     `json:"id"`
	EndpointID       string     `json:"endpoint_id"`
	Status           string     `json:"status"`
	AttemptCount     int        `json:"attempt_count"`
	BreakerOpenUntil *time.Time `json:"breaker_open_until"`
}

// SendMessage posts a message and fails the test on error.
func (a *API) SendMessage(t testing.TB, tenant, eventType string, payload any) Message {
	t.Helper()
	var m Message
	code, err := a.Do(context.Background(), "POST", "/v1/messages", map[string]any{"tenant_id": tenant, "event_type": eventType, "payload": payload}, &m)
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("send message: %d %v", code, err)
	}
	return m
}

// Eventually polls cond every interval until it is true or timeout passes.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("e2e: timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

// Consistently checks cond every interval for the whole of d and fails the
// test the first time it is false.
func Consistently(t testing.TB, d, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if !cond() {
			t.Fatalf("e2e: %s stopped holding", what)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(interval)
	}
}

// Lines returns the output lines of p that contain substr.
func (p *Proc) Lines(substr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(p.Output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

func ioCopy(w io.Writer, resp *http.Response) (int64, error) { return io.Copy(w, resp.Body) }
