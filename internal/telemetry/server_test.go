package telemetry_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A request in flight when ctx ends is answered, and RunServer returns only
// once the server has stopped.
func TestRunServerFinishesInFlightThenStops(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	}), ReadHeaderTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- telemetry.RunServer(ctx, srv, ln, time.Minute) }()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	answered := make(chan string, 1)
	go func() {
		resp, err := client.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			answered <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- string(b)
	}()
	<-entered
	cancel()
	select {
	case err := <-returned:
		t.Fatalf("RunServer returned with a request in flight: %v", err)
	default:
	}
	close(release)
	require.Equal(t, "done", <-answered)
	require.NoError(t, <-returned)
}

// A listener that cannot serve is an error, not a silent stop.
func TestRunServerReportsAServeFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	err = telemetry.RunServer(context.Background(), &http.Server{ReadHeaderTimeout: time.Second}, ln, time.Second)
	require.ErrorContains(t, err, "serve")
}
