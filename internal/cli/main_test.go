package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/internal/cli"
	hookd "github.com/hookd/hookd/sdk/go"
)

// server is the hookd TestMain starts: internal/devserver (a private
// PostgreSQL cluster, the api and a dispatcher of this checkout, retries
// after 0s and 1s). hookdBin is the hookd binary, built with the race
// detector, for the tests that need a process of its own (signals, stdio).
var (
	server struct {
		API   string `json:"api"`
		Token string `json:"token"`
	}
	hookdBin string
)

var repoRoot = filepath.Join("..", "..")

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	binDir, err := os.MkdirTemp("", "hookd-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	hookdBin = filepath.Join(binDir, "hookd")

	var stop func() error
	var logs *tailBuffer
	var g errgroup.Group
	g.Go(func() error {
		build := exec.Command("go", "build", "-race", "-o", hookdBin, "./cmd/hookd")
		build.Dir = repoRoot
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/hookd: %w\n%s", err, out)
		}
		return nil
	})
	g.Go(func() error {
		var err error
		stop, logs, err = startDevserver()
		return err
	})
	if err := g.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		if stop != nil {
			_ = stop()
		}
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop hookd:", err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- hookd's output (last 8 KiB) ---\n%s\n", logs.tail(8<<10))
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		return 1
	}
	return 0
}

// startDevserver runs `go run ./internal/devserver` at the repository's
// root and reads its ready line; stop closes its standard input, which
// stops it, and waits for it.
func startDevserver() (stop func() error, logs *tailBuffer, err error) {
	cmd := exec.Command("go", "run", "./internal/devserver")
	cmd.Dir = repoRoot
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	logs = &tailBuffer{}
	cmd.Stderr = logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop = func() error {
		_ = stdin.Close()
		return cmd.Wait()
	}
	line := make(chan []byte, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Bytes()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case b, ok := <-line:
		if !ok {
			_ = stop()
			return nil, nil, fmt.Errorf("devserver exited:\n%s", logs.tail(8<<10))
		}
		if err := json.Unmarshal(b, &server); err != nil {
			_ = stop()
			return nil, nil, fmt.Errorf("devserver's ready line %q: %w", b, err)
		}
		return stop, logs, nil
	case <-time.After(5 * time.Minute):
		_ = stop()
		return nil, nil, fmt.Errorf("devserver not ready after 5 minutes:\n%s", logs.tail(8<<10))
	}
}

// tailBuffer keeps what is written to it, for the end of a failed run.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *tailBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.buf.Bytes()
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return string(out)
}

// newTenant returns a tenant id no other test uses.
func newTenant(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "cli-" + hex.EncodeToString(b)
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// adminClient is an SDK client of the test's hookd with the admin token.
func adminClient(t *testing.T) *hookd.Client {
	t.Helper()
	c, err := hookd.New(server.API, server.Token)
	require.NoError(t, err)
	return c
}

// result is one run of the command line.
type result struct {
	code           int
	stdout, stderr string
}

// invocation is how a test runs the command line in-process.
type invocation struct {
	env       map[string]string // HOOKD_API and HOOKD_TOKEN default to the admin's
	configDir string            // default: an empty directory of the test's
	stdin     string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// hookdRun runs `hookd args...` in-process and returns its exit code and
// output, as the binary's main would.
func hookdRun(t *testing.T, inv invocation, args ...string) result {
	t.Helper()
	env := map[string]string{"HOOKD_API": server.API, "HOOKD_TOKEN": server.Token}
	if inv.env != nil {
		env = inv.env
	}
	dir := inv.configDir
	if dir == "" {
		dir = t.TempDir()
	}
	var stdout, stderr bytes.Buffer
	err := cli.Run(testContext(t, 2*time.Minute), args, cli.Env{
		Getenv:    func(k string) string { return env[k] },
		Stdin:     strings.NewReader(inv.stdin),
		Stdout:    &stdout,
		Stderr:    &stderr,
		ConfigDir: func() (string, error) { return dir, nil },
	})
	code := cli.ExitCode(err, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ok runs hookd and requires exit 0.
func ok(t *testing.T, args ...string) result {
	t.Helper()
	r := hookdRun(t, invocation{}, args...)
	require.Equal(t, 0, r.code, "hookd %s\n%s", strings.Join(args, " "), r)
	return r
}

// okJSON runs hookd with -o json, requires exit 0 and decodes stdout.
func okJSON[T any](t *testing.T, args ...string) T {
	t.Helper()
	r := ok(t, append(args, "-o", "json")...)
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "hookd %s: stdout is not the JSON expected:\n%s", strings.Join(args, " "), r.stdout)
	return v
}

// receiver answers every webhook 200 and counts them.
func newOKReceiver(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// lineWriter is a concurrency-safe writer that hands each complete line
// to a channel: the tests read tail's and listen's streams as they come.
type lineWriter struct {
	mu    sync.Mutex
	part  []byte
	lines chan string
}

func newLineWriter(n int) *lineWriter { return &lineWriter{lines: make(chan string, n)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- string(w.part[:i]):
		default:
			return 0, errors.New("lineWriter: the test is not reading")
		}
		w.part = w.part[i+1:]
	}
}
