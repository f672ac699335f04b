package tour_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"

	"github.com/hookd/hookd/internal/store/storetest"
)

// tourReceiverAddr is where the tour starts its receiver. The test gives
// the receiver a free port instead, so that two runs never collide.
const tourReceiverAddr = "127.0.0.1:9000"

// tourBlock is one shell block of the README's tour: a fenced block whose
// info string is "sh tour:<step>".
type tourBlock struct {
	step string
	code string
}

// readmeTour returns the README's tour blocks in document order.
func readmeTour(t *testing.T) []tourBlock {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	doc := goldmark.DefaultParser().Parse(text.NewReader(src))
	var blocks []tourBlock
	err = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		fcb, ok := n.(*ast.FencedCodeBlock)
		if !ok || !entering || fcb.Info == nil {
			return ast.WalkContinue, nil
		}
		info := strings.Fields(string(fcb.Info.Segment.Value(src)))
		if len(info) != 2 || info[0] != "sh" || !strings.HasPrefix(info[1], "tour:") {
			return ast.WalkSkipChildren, nil
		}
		var code strings.Builder
		lines := fcb.Lines()
		for i := range lines.Len() {
			seg := lines.At(i)
			code.Write(seg.Value(src))
		}
		blocks = append(blocks, tourBlock{step: strings.TrimPrefix(info[1], "tour:"), code: code.String()})
		return ast.WalkSkipChildren, nil
	})
	require.NoError(t, err)
	return blocks
}

// TestTour runs the README's tour as written: make run's script, then, in a
// second shell, the export line the script prints followed by every
// "sh tour:<step>" block of the README in order. After the steps that
// change something it checks, through the API, what the tour says happens:
// the webhook is delivered with a signature the receiver accepts, a
// delivery to a stopped receiver fails and is retried, and the retry lands
// once the receiver is back, within make run's retry schedule.
func TestTour(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"curl", "jq", "base64"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the README's tour uses %s", tool)
	}

	blocks := readmeTour(t)
	var steps []string
	named := false
	receiverAddr := "127.0.0.1:" + freePort(t)
	for i := range blocks {
		steps = append(steps, blocks[i].step)
		named = named || strings.Contains(blocks[i].code, tourReceiverAddr)
		blocks[i].code = strings.ReplaceAll(blocks[i].code, tourReceiverAddr, receiverAddr)
	}
	for _, want := range []string{"token", "receiver", "endpoint", "message", "hookd", "stop", "restart", "done"} {
		require.Contains(t, steps, want, "the README's tour has no \"sh tour:%s\" block (it has %v)", want, steps)
	}
	require.True(t, named, "the tour's receiver listens on %s; the test moves it to a free port", tourReceiverAddr)

	db := "hookd_tour_" + randomHex(6)
	t.Cleanup(func() { dropDatabase(t, db) })
	// The tour runs twice in a row, each time as someone would: make run,
	// the tour in a second shell, Ctrl-C; the second run finds the first's
	// database, with its tour token and whatever the tour left in it.
	for pass := 1; pass <= 2; pass++ {
		t.Logf("the tour, run %d", pass)
		tourPass(t, blocks, db, receiverAddr)
	}
}

// tourPass runs make run's script on database db and the tour's blocks
// against it, checking each step, then stops the script.
func tourPass(t *testing.T, blocks []tourBlock, db, receiverAddr string) {
	t.Helper()
	rl := startRunLocal(t, map[string]string{
		"LOCAL_PG_URL": storetest.AdminURL(),
		"HOOKD_DB":     db,
	})
	require.Contains(t, rl.database, "/"+db+"?")
	require.Contains(t, rl.database, "(the server at LOCAL_PG_URL)")

	client := &http.Client{Timeout: 10 * time.Second}
	resp, body := call(t, client, http.MethodGet, rl.dashboard, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)

	sh := startShell(t, rl.dir)
	sh.exec(t, "export", rl.export)

	// delivery reads the first delivery of message id with the bootstrap
	// token.
	type deliveryView struct {
		Status         string `json:"status"`
		AttemptCount   int    `json:"attempt_count"`
		LastStatusCode *int   `json:"last_status_code"`
	}
	delivery := func(id string) (deliveryView, bool) {
		body, err := get(client, rl.api+"/v1/messages/"+id, rl.token)
		if err != nil {
			return deliveryView{}, false
		}
		var m struct {
			Deliveries []deliveryView `json:"deliveries"`
		}
		if json.Unmarshal(body, &m) != nil || len(m.Deliveries) != 1 {
			return deliveryView{}, false
		}
		return m.Deliveries[0], true
	}
	delivered := func(what string, within time.Duration) {
		id := sh.value(t, "MSG")
		require.True(t, strings.HasPrefix(id, "msg_"), "MSG=%q", id)
		require.Eventually(t, func() bool {
			d, ok := delivery(id)
			// The receiver answers 200 only to a webhook whose signature
			// checks out against $SECRET.
			return ok && d.Status == "delivered" && d.LastStatusCode != nil && *d.LastStatusCode == 200
		}, within, 100*time.Millisecond, "%s: message %s was not delivered", what, id)
	}

	checks := map[string]func(){
		"token": func() {
			token := sh.value(t, "TOKEN")
			require.True(t, strings.HasPrefix(token, "hkd_"), "TOKEN is not a stored token: %q", token)
			require.NotEqual(t, rl.token, token)
		},
		"receiver": func() {
			require.Eventually(t, func() bool {
				c, err := net.DialTimeout("tcp", receiverAddr, time.Second)
				if err == nil {
					_ = c.Close()
				}
				return err == nil
			}, time.Minute, 50*time.Millisecond, "the tour's receiver does not listen on %s", receiverAddr)
		},
		"endpoint": func() {
			ep := sh.value(t, "EP")
			require.True(t, strings.HasPrefix(ep, "ep_"), "EP=%q", ep)
		},
		"message": func() { delivered("first message", time.Minute) },
		// The hookd steps exit 0 (the shell runs with set -e) and print
		// the API's JSON, piped as they are here.
		"hookd": func() {
			require.Contains(t, sh.out.String(), `"classification": "success"`, "hookd deliveries attempts printed no successful attempt")
		},
		"stop": func() {
			id := sh.value(t, "MSG")
			require.True(t, strings.HasPrefix(id, "msg_"), "MSG=%q", id)
			require.Eventually(t, func() bool {
				d, ok := delivery(id)
				return ok && d.AttemptCount >= 1 && d.Status != "delivered"
			}, time.Minute, 100*time.Millisecond, "no failed attempt of message %s while the receiver is stopped", id)
		},
		// make run's schedule draws the retries within 5 s, 10 s, 30 s
		// and 1 min: the receiver is back well before the last one.
		"restart": func() { delivered("after the receiver came back", 3*time.Minute) },
		// The tour leaves no endpoint behind: a second tour's messages
		// have one delivery each, as the first's.
		"done": func() {
			resp, body := call(t, client, http.MethodGet, rl.api+"/v1/endpoints?tenant_id=acme", rl.token, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			var list struct {
				Data []json.RawMessage `json:"data"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &list))
			require.Empty(t, list.Data, "endpoints of acme left after the tour")
		},
	}
	for _, b := range blocks {
		sh.exec(t, b.step, b.code)
		if check, ok := checks[b.step]; ok {
			check()
		}
	}
	rl.stop(t)
}

// shell is a bash process fed the tour's blocks one by one, as someone
// pasting them into a second terminal would: variables and background jobs
// carry over from one block to the next.
type shell struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *syncBuffer
	done chan error
	vals string
	n    int
}

// shellEnv are the variables the export line sets: the test's own
// environment must not provide them.
var shellEnv = []string{"API", "TOKEN", "SECRET", "DATABASE_URL", "RECEIVER", "EP", "MSG"}

func startShell(t *testing.T, dir string) *shell {
	t.Helper()
	s := &shell{out: newSyncBuffer(), done: make(chan error, 1), vals: t.TempDir()}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(shellEnv, k) && !slices.Contains(scriptEnv, k) {
			env = append(env, kv)
		}
	}
	s.cmd = exec.Command("bash", "--noprofile", "--norc")
	s.cmd.Dir = dir
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := s.cmd.StdinPipe()
	require.NoError(t, err)
	s.in = in
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		// The shell and what it started in the background (the receiver).
		_ = s.in.Close()
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		if t.Failed() {
			t.Logf("tour shell output:\n%s", s.out.String())
		}
	})
	s.exec(t, "options", "set -euo pipefail")
	return s
}

// exec runs code in the shell and returns once it has finished; the test
// fails if the shell exits (a command failed) or the code takes more than a
// minute.
func (s *shell) exec(t *testing.T, step, code string) {
	t.Helper()
	s.n++
	marker := fmt.Sprintf("__tour_block_%d_done__", s.n)
	_, err := fmt.Fprintf(s.in, "%s\necho %s\n", strings.TrimRight(code, "\n"), marker)
	require.NoError(t, err, "step %s: write to the shell", step)
	deadline := time.After(time.Minute)
	for !strings.Contains(s.out.String(), marker) {
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("step %s: the shell exited (%v) running:\n%s", step, err, code)
		case <-deadline:
			t.Fatalf("step %s did not finish within a minute:\n%s", step, code)
		case <-s.out.wrote:
		}
	}
}

// value returns the shell variable name.
func (s *shell) value(t *testing.T, name string) string {
	t.Helper()
	file := filepath.Join(s.vals, name)
	s.exec(t, "value of "+name, fmt.Sprintf(`printf '%%s' "${%s-}" >'%s'`, name, file))
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	return string(b)
}

// syncBuffer collects a process's output and signals each write.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{wrote: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
