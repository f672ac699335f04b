package hookd_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExamples builds examples/go's sender and receiver and runs them
// against the test's hookd: the receiver verifies and prints the message
// the sender sends.
func TestExamples(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./sender", "./receiver")
	build.Dir = filepath.Join(repoRoot, "examples", "go")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	secret := newSecret()

	receiver := exec.Command(filepath.Join(bin, "receiver"))
	receiver.Env = append(os.Environ(), "LISTEN_ADDR=127.0.0.1:0", "WEBHOOK_SECRET="+secret)
	stdout, err := receiver.StdoutPipe()
	require.NoError(t, err)
	receiver.Stderr = os.Stderr
	require.NoError(t, receiver.Start())
	t.Cleanup(func() {
		_ = receiver.Process.Kill()
		_ = receiver.Wait()
	})
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the receiver exited before %s", what)
			return l
		case <-time.After(time.Minute):
			t.Fatalf("the receiver printed no %s within a minute", what)
			return ""
		}
	}
	listening := regexp.MustCompile(`^listening on (http://\S+)$`).FindStringSubmatch(next("address"))
	require.NotNil(t, listening)

	sender := exec.Command(filepath.Join(bin, "sender"))
	env := []string{"HOOKD_API=" + server.API, "HOOKD_TOKEN=" + server.Token, "RECEIVER_URL=" + listening[1], "WEBHOOK_SECRET=" + secret}
	sender.Env = append(os.Environ(), env...)
	out, err = sender.CombinedOutput()
	require.NoError(t, err, "%s", out)
	msg := regexp.MustCompile(`(?m)^message (msg_\S+)$`).FindStringSubmatch(string(out))
	require.NotNil(t, msg, "%s", out)

	for {
		line := next("verified webhook")
		if strings.HasPrefix(line, msg[1]+" verified ") {
			require.JSONEq(t, `{"invoice":"in_1","amount":4200}`, strings.TrimPrefix(line, msg[1]+" verified "))
			return
		}
	}
}
