package hookd_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// server is the hookd that TestMain starts: the repository's devserver
// (internal/devserver), with a private PostgreSQL cluster, the api and a
// dispatcher, run from this checkout.
var server struct {
	API         string `json:"api"`
	Token       string `json:"token"`
	DatabaseURL string `json:"database_url"`
}

// repoRoot is the repository's root, two levels above sdk/go.
var repoRoot = filepath.Join("..", "..")

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	stop, logs, err := startDevserver()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start hookd:", err)
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
// stops it, and waits for it to exit.
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

// newTenant returns a tenant id no other test uses, so each test's lists
// hold only its own endpoints and messages.
func newTenant(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sdk-" + hex.EncodeToString(b)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
