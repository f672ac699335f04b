package store

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listener holds one connection LISTENing on hookd's channels and hands each
// notification's payload to the handler registered for its channel. After a
// reconnect it calls every OnReconnect hook, since notifications sent while
// it was away are lost.
type Listener struct {
	url    string
	logger *slog.Logger

	mu          sync.Mutex
	handlers    map[string]func(payload string)
	onReconnect []func()
	ready       chan struct{}
	readyOnce   sync.Once
}

// NewListener returns a listener for the database at url; a nil logger
// discards.
func NewListener(url string, logger *slog.Logger) *Listener {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{url: url, logger: logger, handlers: map[string]func(string){}, ready: make(chan struct{})}
}

// Handle registers fn for channel. Call before Run.
func (l *Listener) Handle(channel string, fn func(payload string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handlers[channel] = fn
}

// OnReconnect registers fn to run after every reconnect.
func (l *Listener) OnReconnect(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onReconnect = append(l.onReconnect, fn)
}

// Ready is closed once the first LISTEN is in place.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// Listener reconnect backoff: doubling from the minimum up to the maximum
// while connecting fails, back to the minimum once LISTEN is in place.
const (
	listenerMinBackoff = 100 * time.Millisecond
	listenerMaxBackoff = 5 * time.Second
)

// Run listens until ctx ends, reconnecting with backoff.
func (l *Listener) Run(ctx context.Context) {
	backoff := listenerMinBackoff
	first := true
	for ctx.Err() == nil {
		listening, err := l.listen(ctx, !first)
		if ctx.Err() != nil {
			return
		}
		first = false
		if listening {
			// The backoff is for a database that does not answer; one that
			// answered and then dropped the connection gets a prompt
			// reconnect, however long an earlier outage was.
			backoff = listenerMinBackoff
		}
		l.logger.Warn("listener_disconnected", slog.String("error", errString(err)), slog.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, listenerMaxBackoff)
	}
}

// listen connects, LISTENs and dispatches notifications until the
// connection fails; listening reports whether LISTEN was in place.
func (l *Listener) listen(ctx context.Context, reconnected bool) (listening bool, err error) {
	conn, err := pgx.Connect(ctx, l.url)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	l.mu.Lock()
	channels := make([]string, 0, len(l.handlers))
	for ch := range l.handlers {
		channels = append(channels, ch)
	}
	hooks := append([]func(){}, l.onReconnect...)
	l.mu.Unlock()
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return false, err
		}
	}
	l.readyOnce.Do(func() { close(l.ready) })
	if reconnected {
		for _, h := range hooks {
			h()
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		l.mu.Lock()
		fn := l.handlers[n.Channel]
		l.mu.Unlock()
		if fn != nil {
			fn(n.Payload)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
