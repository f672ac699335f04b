package tour_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/pgcluster"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestRunLocal runs deploy/run-local.sh (what `make run` runs) as a real
// process for each way it finds PostgreSQL, talks to the API it starts, has
// the dispatcher deliver a webhook, then stops it with SIGTERM and checks
// that nothing it started is left running. The server at LOCAL_PG_URL, the
// way most newcomers meet it, runs the README's tour (TestTour) instead.
func TestRunLocal(t *testing.T) {
	t.Parallel()

	t.Run("DATABASE_URL", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		rl := startRunLocal(t, map[string]string{
			"DATABASE_URL": db.URL,
			// Never reached: DATABASE_URL answers.
			"LOCAL_PG_URL": "postgres://postgres@127.0.0.1:" + deadPort(t) + "/postgres?sslmode=disable",
		})
		require.Contains(t, rl.database, "/"+db.Name+"?")
		require.Contains(t, rl.database, "(DATABASE_URL)")
		exercise(t, rl)
		rl.stop(t)
	})

	t.Run("private cluster", func(t *testing.T) {
		t.Parallel()
		dataDir := privateDataDir(t)
		pgPort := freePort(t)
		rl := startRunLocal(t, map[string]string{
			"LOCAL_PG_URL":   "postgres://postgres@127.0.0.1:" + deadPort(t) + "/postgres?sslmode=disable",
			"HOOKD_DATA_DIR": dataDir,
			"HOOKD_PG_PORT":  pgPort,
		})
		require.Contains(t, rl.database, "127.0.0.1:"+pgPort+"/hookd?")
		require.Contains(t, rl.database, "(the private cluster in "+filepath.Join(dataDir, "pg")+")")
		require.FileExists(t, filepath.Join(dataDir, "pg", "postmaster.pid"))
		exercise(t, rl)
		rl.stop(t)

		require.Contains(t, rl.output(), "stopping the private PostgreSQL cluster")
		require.NoFileExists(t, filepath.Join(dataDir, "pg", "postmaster.pid"), "the private cluster is stopped")
		_, err := net.DialTimeout("tcp", "127.0.0.1:"+pgPort, time.Second)
		require.Error(t, err, "nothing listens on the private cluster's port")
	})
}

// runLocal is one running run-local.sh.
type runLocal struct {
	cmd        *exec.Cmd
	done       chan error
	dir        string // holds bin/, the binaries the script built
	outFile    string
	api        string
	dashboard  string
	token      string
	metrics    string
	apiMetrics string
	database   string
	export     string // the export line printed for a second shell
	apiPID     int
	dispPID    int
}

var (
	apiLine        = regexp.MustCompile(`(?m)^\s+API\s+(http://\S+)$`)
	dashboardLine  = regexp.MustCompile(`(?m)^\s+dashboard\s+(http://\S+)`)
	exportLine     = regexp.MustCompile(`(?m)^\s+(export API=.*)$`)
	tokenLine      = regexp.MustCompile(`(?m)^\s+API token\s+(\S+)`)
	metricsLine    = regexp.MustCompile(`(?m)^\s+metrics\s+(http://\S+)$`)
	apiMetricsLine = regexp.MustCompile(`(?m)^\s+api metrics\s+(http://\S+)$`)
	databaseLine   = regexp.MustCompile(`(?m)^\s+database\s+(.+)$`)
	processesLine  = regexp.MustCompile(`(?m)^\s+processes\s+api pid (\d+), dispatcher pid (\d+)$`)
)

// scriptEnv are the variables run-local.sh reads; the test sets each itself.
var scriptEnv = []string{
	"DATABASE_URL", "LOCAL_PG_URL", "HOOKD_DB", "HOOKD_DATA_DIR", "HOOKD_PG_PORT", "HOOKD_BIN_DIR",
	"API_TOKEN", "LISTEN_ADDR", "METRICS_ADDR", "API_METRICS_ADDR", "NO_MIGRATE", "RETRY_SCHEDULE",
}

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// binDir is the binary directory every run-local.sh of this test binary
// shares: the first run's caller builds it as the script does, so each
// script's `go build -o` finds its binaries up to date and links nothing
// (its four runs linked 16 binaries, about 50 CPU-seconds, otherwise).
var binDir struct {
	once    sync.Once
	dir     string
	release func() // retires the watchdog that removes dir if this binary dies
	err     error
}

// sharedBinDir returns binDir's directory, built on first use;
// removeSharedBinDir, from TestMain, removes it.
func sharedBinDir(t *testing.T) string {
	t.Helper()
	binDir.once.Do(func() {
		dir, err := os.MkdirTemp("", "hookd-tour-bin-")
		if err != nil {
			binDir.err = err
			return
		}
		binDir.dir = dir
		// A test binary killed by its timeout never reaches TestMain's
		// removal; the watchdog (as internal/e2e's binaries have) does.
		if binDir.release, err = pgcluster.RemoveOnExit(dir); err != nil {
			binDir.err = err
			return
		}
		build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator),
			"./cmd/api", "./cmd/dispatcher", "./cmd/hookd", "./internal/delivery/deliverytest/cmd/receiver")
		build.Dir = repoRoot(t)
		if out, err := build.CombinedOutput(); err != nil {
			binDir.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, binDir.err)
	return binDir.dir
}

// startRunLocal starts run-local.sh with its own ports plus extra, and
// returns once it has printed that hookd is up.
func startRunLocal(t *testing.T, extra map[string]string) *runLocal {
	t.Helper()
	dir := t.TempDir()
	rl := &runLocal{done: make(chan error, 1), dir: dir, outFile: filepath.Join(dir, "output.txt")}
	out, err := os.Create(rl.outFile)
	require.NoError(t, err)
	defer out.Close()

	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(scriptEnv, k) {
			env = append(env, kv)
		}
	}
	// bin is where the script builds and where the tour's shell, which
	// runs here, finds bin/api and the rest: the shared directory.
	require.NoError(t, os.Symlink(sharedBinDir(t), filepath.Join(dir, "bin")))
	rl.token = "runlocal-" + randomHex(8)
	vars := map[string]string{
		"HOOKD_BIN_DIR": filepath.Join(dir, "bin"),
		"API_TOKEN":     rl.token,
		"LISTEN_ADDR":   "127.0.0.1:" + freePort(t),
		"METRICS_ADDR":  "127.0.0.1:" + freePort(t),
		// The api's METRICS_ADDR.
		"API_METRICS_ADDR": "127.0.0.1:" + freePort(t),
	}
	for k, v := range extra {
		vars[k] = v
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}

	rl.cmd = exec.Command("bash", "run-local.sh")
	rl.cmd.Dir = filepath.Join(repoRoot(t), "deploy")
	rl.cmd.Env = env
	rl.cmd.Stdout, rl.cmd.Stderr = out, out
	rl.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, rl.cmd.Start())
	go func() { rl.done <- rl.cmd.Wait() }()
	t.Cleanup(func() {
		// Whatever happened, leave no process behind: the script's whole
		// process group goes. (A private cluster runs in its own session;
		// privateDataDir's cleanup stops it.)
		_ = syscall.Kill(-rl.cmd.Process.Pid, syscall.SIGKILL)
		<-rl.done
		if t.Failed() {
			t.Logf("run-local.sh output:\n%s", rl.output())
		}
	})

	deadline := time.Now().Add(4 * time.Minute)
	for {
		text := rl.output()
		if strings.Contains(text, "run-local: hookd is up") && strings.Contains(text, "Ctrl-C stops everything.") {
			break
		}
		select {
		case err := <-rl.done:
			rl.done <- err
			t.Fatalf("run-local.sh exited before hookd was up: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "run-local.sh did not report hookd up in time")
	}

	text := rl.output()
	rl.api = submatch(t, apiLine, text)[1]
	require.Equal(t, "http://"+vars["LISTEN_ADDR"], rl.api)
	rl.dashboard = submatch(t, dashboardLine, text)[1]
	rl.export = submatch(t, exportLine, text)[1]
	require.Equal(t, rl.token, submatch(t, tokenLine, text)[1])
	rl.metrics = submatch(t, metricsLine, text)[1]
	require.Equal(t, "http://"+vars["METRICS_ADDR"]+"/metrics", rl.metrics)
	rl.apiMetrics = submatch(t, apiMetricsLine, text)[1]
	require.Equal(t, "http://"+vars["API_METRICS_ADDR"]+"/metrics", rl.apiMetrics)
	rl.database = submatch(t, databaseLine, text)[1]
	pids := submatch(t, processesLine, text)
	rl.apiPID, err = strconv.Atoi(pids[1])
	require.NoError(t, err)
	rl.dispPID, err = strconv.Atoi(pids[2])
	require.NoError(t, err)
	return rl
}

func (rl *runLocal) output() string {
	b, _ := os.ReadFile(rl.outFile)
	return string(b)
}

// stop sends SIGTERM to the script and checks it stops the api and the
// dispatcher and exits with 143.
func (rl *runLocal) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, rl.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-rl.done:
		rl.done <- err
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 143, ee.ExitCode(), "run-local.sh exits 128+SIGTERM")
	case <-time.After(time.Minute):
		t.Fatal("run-local.sh did not exit within a minute of SIGTERM")
	}
	for _, pid := range []int{rl.apiPID, rl.dispPID} {
		require.Eventually(t, func() bool { return processGone(pid) }, 10*time.Second, 50*time.Millisecond,
			"process %d outlived run-local.sh", pid)
	}
	require.Contains(t, rl.output(), "dispatcher_stopped")
	require.Contains(t, rl.output(), "api_stopping")
}

// exercise checks readiness and auth, registers an endpoint at a test
// receiver, sends a message and waits for the dispatcher to deliver it.
func exercise(t *testing.T, rl *runLocal) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}

	resp, body := call(t, client, http.MethodGet, rl.api+"/readyz", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, body = call(t, client, http.MethodGet, rl.metrics, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, body = call(t, client, http.MethodGet, rl.dashboard, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)

	secret, err := delivery.GenerateSecret(rand.Reader)
	require.NoError(t, err)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{secret}})
	endpoint := map[string]any{"tenant_id": "acme", "url": rc.URL("/hooks"), "secret": secret}

	resp, body = call(t, client, http.MethodPost, rl.api+"/v1/endpoints", "", endpoint)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)

	resp, body = call(t, client, http.MethodPost, rl.api+"/v1/endpoints", rl.token, endpoint)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	var ep struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ep))
	require.NotEmpty(t, ep.ID)

	resp, body = call(t, client, http.MethodPost, rl.api+"/v1/messages", rl.token,
		map[string]any{"tenant_id": "acme", "event_type": "invoice.paid", "payload": map[string]int{"amount": 42}})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	var msg struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &msg))

	require.Eventually(t, func() bool {
		body, err := get(client, rl.api+"/v1/messages/"+msg.ID, rl.token)
		if err != nil {
			return false
		}
		var m struct {
			Deliveries []struct {
				Status string `json:"status"`
			} `json:"deliveries"`
		}
		return json.Unmarshal(body, &m) == nil && len(m.Deliveries) == 1 && m.Deliveries[0].Status == "delivered"
	}, time.Minute, 100*time.Millisecond, "the message was not delivered")
	stats := rc.Stats("/hooks")
	require.Equal(t, 1, stats.DistinctDelivered)
	require.Zero(t, stats.BadSignatures)
	require.Equal(t, 1, rc.DeliveredIDs("/hooks")[msg.ID])

	resp, body = call(t, client, http.MethodGet, rl.apiMetrics, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `http_requests_total{method="POST",route="/v1/messages",status="202"} 1`)
}

// get is call for polling: it fails nothing.
func get(client *http.Client, url, token string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func call(t *testing.T, client *http.Client, method, url, token string, body any) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// privateDataDir returns a directory for a private cluster that the
// postgres user can use when the test runs as root, and stops any cluster
// left running in it when the test ends.
func privateDataDir(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "a private cluster run as root needs a postgres user")
		uid, err := strconv.Atoi(u.Uid)
		require.NoError(t, err)
		gid, err := strconv.Atoi(u.Gid)
		require.NoError(t, err)
		require.NoError(t, os.Chown(dir, uid, gid))
		// t.TempDir's directories are 0700: let postgres through.
		require.NoError(t, os.Chmod(tmp, 0o755))
		require.NoError(t, os.Chmod(filepath.Dir(tmp), 0o755))
	}
	t.Cleanup(func() {
		pgdata := filepath.Join(dir, "pg")
		if _, err := os.Stat(filepath.Join(pgdata, "postmaster.pid")); err != nil {
			return
		}
		pgCtl, err := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
		if err != nil || len(pgCtl) == 0 {
			t.Errorf("a private cluster is left running in %s and pg_ctl is not found", pgdata)
			return
		}
		args := []string{pgCtl[len(pgCtl)-1], "-D", pgdata, "-m", "immediate", "-w", "stop"}
		if os.Geteuid() == 0 {
			args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
		}
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Errorf("stop the private cluster: %v\n%s", err, out)
		}
	})
	return dir
}

func dropDatabase(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Errorf("connect to drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, pgx.Identifier{name}.Sanitize())); err != nil {
		t.Errorf("drop database %s: %v", name, err)
	}
}

// processGone reports whether pid has exited (a zombie counts as exited).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// freePort returns a loopback port that was free a moment ago and that no
// other caller in this process has been given (the kernel may hand a port
// just closed to the next listener).
func freePort(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		if !ports[port] {
			ports[port] = true
			return strconv.Itoa(port)
		}
	}
}

// deadPort returns a loopback port nothing listens on.
func deadPort(t *testing.T) string { return freePort(t) }

func submatch(t *testing.T, re *regexp.Regexp, text string) []string {
	t.Helper()
	m := re.FindStringSubmatch(text)
	require.NotNil(t, m, "no line matching %s in:\n%s", re, text)
	return m
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// removeSharedBinDir removes binDir's directory and retires its watchdog.
func removeSharedBinDir() {
	if binDir.dir != "" {
		_ = os.RemoveAll(binDir.dir)
	}
	if binDir.release != nil {
		binDir.release()
	}
}
