package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hookd/hookd/internal/pgcluster"
)

// Ready is the line devserver prints once hookd answers.
type Ready struct {
	// API is the api's base URL.
	API string `json:"api"`
	// Token is an admin token stored with `api token create`.
	Token string `json:"token"`
	// DatabaseURL is the database the api and dispatcher use.
	DatabaseURL string `json:"database_url"`
}

var (
	listenRE  = regexp.MustCompile(`api listening on (http://\S+)`)
	startedRE = regexp.MustCompile(`msg=dispatcher_started`)
)

// startTimeout bounds each process's start: a cold build of both binaries
// on a loaded machine takes about a minute.
const startTimeout = 3 * time.Minute

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("devserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	retrySchedule := fs.String("retry-schedule", "0s,1s", "the dispatcher's delay before each attempt: two attempts within a second, so a failing delivery fails fast")
	if err := fs.Parse(args); err != nil {
		return err
	}

	// Standard input closing ends the run, whatever else happens.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()

	startCtx, startCancel := context.WithTimeout(ctx, startTimeout)
	defer startCancel()
	cluster, err := pgcluster.Start(startCtx, pgcluster.Options{})
	if err != nil {
		return fmt.Errorf("private cluster: %w", err)
	}
	defer func() { _ = cluster.Remove() }()
	dbURL := cluster.URL("postgres", "postgres")

	binDir, err := os.MkdirTemp("", "hookd-devserver-bin-")
	if err != nil {
		return fmt.Errorf("binaries: %w", err)
	}
	release, err := pgcluster.RemoveOnExit(binDir)
	if err != nil {
		return fmt.Errorf("binaries: %w", err)
	}
	defer func() {
		_ = os.RemoveAll(binDir)
		release()
	}()
	// Built with the race detector: make test's `go test -race ./...` has
	// compiled every package so already, leaving only the link to do.
	build := exec.CommandContext(startCtx, "go", "build", "-race", "-o", binDir+string(os.PathSeparator),
		"github.com/hookd/hookd/cmd/api", "github.com/hookd/hookd/cmd/dispatcher")
	build.Env = os.Environ()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	apiBin, dispatcherBin := filepath.Join(binDir, "api"), filepath.Join(binDir, "dispatcher")

	logs := &lockedWriter{w: stderr}
	base := map[string]string{"PATH": getenv("PATH"), "HOME": os.TempDir(), "DATABASE_URL": dbURL, "ALLOW_PRIVATE_TARGETS": "true", "METRICS_ADDR": "127.0.0.1:0"}
	bootstrap, err := randomHex(24)
	if err != nil {
		return err
	}
	api, err := start(startCtx, "api", logs, listenRE, apiBin, with(base, map[string]string{
		"API_TOKEN": bootstrap, "LISTEN_ADDR": "127.0.0.1:0", "DB_MAX_CONNS": "8", "RATE_LIMIT": "0",
	}), "serve")
	if err != nil {
		return err
	}
	defer api.stop()
	dispatcher, err := start(startCtx, "dispatcher", logs, startedRE, dispatcherBin, with(base, map[string]string{
		"NO_MIGRATE": "true", "DB_MAX_CONNS": "10", "RETRY_SCHEDULE": *retrySchedule,
		// A short shadow makes the tuning leader look for queued passes
		// every 3 s (a tenth of it), so a client's tune is answered soon.
		"TUNE_SHADOW": "30s",
	}), "run")
	if err != nil {
		return err
	}
	defer dispatcher.stop()

	tokenCmd := exec.CommandContext(startCtx, apiBin, "token", "create", "--name", "devserver")
	tokenCmd.Env = envList(base)
	tokenCmd.Stderr = logs
	out, err := tokenCmd.Output()
	if err != nil {
		return fmt.Errorf("api token create: %w", err)
	}
	ready := Ready{API: api.match[1], Token: strings.TrimSpace(string(out)), DatabaseURL: dbURL}
	if err := json.NewEncoder(stdout).Encode(ready); err != nil {
		return fmt.Errorf("print the ready line: %w", err)
	}

	select {
	case <-ctx.Done():
		return nil
	case <-api.done:
		return fmt.Errorf("api exited: %w", api.err)
	case <-dispatcher.done:
		return fmt.Errorf("dispatcher exited: %w", dispatcher.err)
	}
}

// proc is one started process.
type proc struct {
	name  string
	cmd   *exec.Cmd
	match []string // the ready line's submatches
	done  chan struct{}
	err   error
}

// start runs binary and returns once a line of its output matches ready.
// Its output is copied to logs, each line prefixed with its name.
func start(ctx context.Context, name string, logs io.Writer, ready *regexp.Regexp, binary string, env map[string]string, args ...string) (*proc, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = envList(env)
	// Its own process group, killed with devserver however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	matched := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(logs, "%s: %s\n", name, line)
			if m := ready.FindStringSubmatch(line); m != nil {
				select {
				case matched <- m:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() {
		p.err = cmd.Wait()
		_ = w.Close()
		close(p.done)
	}()
	select {
	case p.match = <-matched:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it was ready: %w", name, p.err)
	case <-ctx.Done():
		p.stop()
		return nil, fmt.Errorf("%s not ready: %w", name, ctx.Err())
	}
}

// stop sends SIGTERM and waits for the process, killing it after 10
// seconds.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func with(base, extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func envList(env map[string]string) []string {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return list
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", errors.New("random token: " + err.Error())
	}
	return hex.EncodeToString(b), nil
}

// lockedWriter serialises the processes' log lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
