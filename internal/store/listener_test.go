package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestListenerReconnectsPromptlyAfterEveryDrop: a listener whose working
// connection is terminated again and again reconnects within a second each
// time. Its backoff is for a database that does not answer; it used to keep
// doubling across successful reconnects, so after a few drops (or one long
// outage) every later blip cost 5 s of missed notifications.
func TestListenerReconnectsPromptlyAfterEveryDrop(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	l := store.NewListener(db.URL, nil)
	got := make(chan string, 1)
	reconnected := make(chan struct{}, 1)
	l.Handle("hookd_test", func(p string) { got <- p })
	l.OnReconnect(func() { reconnected <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener not ready")
	}

	for drop := 1; drop <= 8; drop++ {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`).Scan(&n))
		require.Equal(t, 1, n, "drop %d: one listening connection", drop)
		select {
		case <-reconnected:
		case <-time.After(time.Second):
			t.Fatalf("drop %d: not listening again within 1s", drop)
		}
	}
	_, err := db.Pool.Exec(context.Background(), `SELECT pg_notify('hookd_test', 'still here')`)
	require.NoError(t, err)
	select {
	case p := <-got:
		require.Equal(t, "still here", p)
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after the reconnects")
	}
}
