package delivery

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// ClassLoader lists the stored traffic classes.
type ClassLoader interface {
	ListClasses(ctx context.Context) ([]trafficclass.Class, error)
}

var _ ClassLoader = (*store.Store)(nil)

// ClassBook keeps every traffic class in memory (there are few) and answers
// which class, breaker config and auth rule an endpoint runs under. It
// reloads on a NOTIFY on store.ClassChannel, so a tuned class applies to
// the next decision of every dispatcher; the breaker's own state is not
// touched by a class change.
type ClassBook struct {
	// OpenDurations, when set before Load, gets each class's open_duration
	// in seconds (breaker_class_open_duration_seconds).
	OpenDurations *prometheus.GaugeVec

	loader ClassLoader
	logger *slog.Logger

	mu      sync.RWMutex
	classes map[string]trafficclass.Class
}

var _ BreakerConfigs = (*ClassBook)(nil)

// NewClassBook returns an empty book; call Load.
func NewClassBook(loader ClassLoader, logger *slog.Logger) *ClassBook {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &ClassBook{loader: loader, logger: logger, classes: map[string]trafficclass.Class{}}
}

// Load replaces the book with the stored classes.
func (b *ClassBook) Load(ctx context.Context) error {
	list, err := b.loader.ListClasses(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]trafficclass.Class, len(list))
	for _, c := range list {
		m[c.Name] = c
	}
	b.mu.Lock()
	b.classes = m
	if b.OpenDurations != nil {
		// Under the lock, so two reloads cannot interleave their writes.
		b.OpenDurations.Reset()
		for name, c := range m {
			b.OpenDurations.WithLabelValues(name).Set(c.Breaker.OpenDuration.Seconds())
		}
	}
	b.mu.Unlock()
	return nil
}

// HandleNotice reloads the book after a class changed.
func (b *ClassBook) HandleNotice(string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Load(ctx); err != nil {
		b.logger.Warn("class_reload", slog.String("error", err.Error()))
	}
}

// Class returns the class t runs under: its effective class, else the
// default class, else the built-in default config (a class deleted under
// a racing endpoint update must not stop deliveries).
func (b *ClassBook) Class(t *Target) trafficclass.Class {
	name := t.EffectiveClass()
	b.mu.RLock()
	c, ok := b.classes[name]
	if !ok {
		c, ok = b.classes[trafficclass.DefaultClass]
	}
	b.mu.RUnlock()
	if ok {
		return c
	}
	return fallbackClass
}

var fallbackClass = func() trafficclass.Class {
	for _, c := range trafficclass.Builtins() {
		if c.Name == trafficclass.DefaultClass {
			return c
		}
	}
	return trafficclass.Class{Name: trafficclass.DefaultClass, Breaker: breaker.DefaultConfig(), Enforce: true, AuthDisableAfter: 10, AuthDisableMinDuration: 5 * time.Minute}
}()

// ClassName returns the name of the class t runs under (see Class).
func (b *ClassBook) ClassName(t *Target) string {
	return b.Class(t).Name
}

// BreakerConfig returns t's class's breaker config and enforce flag.
func (b *ClassBook) BreakerConfig(t *Target) (breaker.Config, bool) {
	c := b.Class(t)
	return c.Breaker, c.Enforce
}

// AuthRule returns t's class's auto-disable rule.
func (b *ClassBook) AuthRule(t *Target) store.AuthRule {
	c := b.Class(t)
	return store.AuthRule{After: c.AuthDisableAfter, MinDuration: c.AuthDisableMinDuration}
}

// MaxWindow returns the longest breaker window of any class (at least the
// default config's), which bounds how long breaker buckets are kept.
func (b *ClassBook) MaxWindow() time.Duration {
	b.mu.RLock()
	defer b.mu.RUnlock()
	longest := breaker.DefaultConfig().Window
	for _, c := range b.classes {
		longest = max(longest, c.Breaker.Window)
	}
	return longest
}
