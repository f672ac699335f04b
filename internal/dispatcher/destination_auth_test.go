package dispatcher_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

// startServer starts a broker of the test's own (the machine's have no
// credentials to refuse, and a test changes no server it did not start)
// and waits until a line of its output contains ready; it is killed at
// the test's end.
func startServer(t *testing.T, ready string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = cmd.Stderr
	require.NoError(t, cmd.Start(), "start %s", name)
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	lines := make(chan string, 64)
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	var seen []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "%s exited before ready: %s", name, strings.Join(seen, "\n"))
			seen = append(seen, l)
			if strings.Contains(l, ready) {
				return
			}
		case <-timeout:
			require.FailNow(t, name+" not ready", strings.Join(seen, "\n"))
		}
	}
}

// freeLoopbackPort is a loopback port free when asked.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNATSDestinationWrongCredentials: a NATS server of the test's own
// refusing the password disables the endpoint for its auth failures.
func TestNATSDestinationWrongCredentials(t *testing.T) {
	t.Parallel()
	port := freeLoopbackPort(t)
	startServer(t, "Server is ready", "nats-server", "-a", "127.0.0.1", "-p", fmt.Sprint(port),
		"-js", "-sd", t.TempDir(), "--user", "hookd", "--pass", "right")
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.NATS, &destination.NATSConfig{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Subject: "hooks.events",
		Username: "hookd", Password: "wrong"}, false)
	h.send(10)
	h.requireAuthDisabled(e.ID)
}

// TestMQTTDestinationWrongCredentials: a Mosquitto of the test's own
// refusing the password disables the endpoint for its auth failures.
func TestMQTTDestinationWrongCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	out, err := exec.Command("mosquitto_passwd", "-b", "-c", passwd, "hookd", "right").CombinedOutput()
	require.NoError(t, err, "%s", out)
	port := freeLoopbackPort(t)
	conf := filepath.Join(dir, "mosquitto.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil,
		"listener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\npersistence false\nlog_dest stderr\nuser root\n", port, passwd), 0o600))
	startServer(t, "running", "mosquitto", "-c", conf)
	h := startDest(t, dispatcherDeps())
	e := h.endpoint(destination.MQTT, &destination.MQTTConfig{URL: fmt.Sprintf("tcp://127.0.0.1:%d", port), Topic: "hooks",
		Username: "hookd", Password: "wrong"}, false)
	h.send(10)
	h.requireAuthDisabled(e.ID)
}
