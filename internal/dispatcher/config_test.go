package dispatcher_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/dispatcher"
)

func TestDefaultConfigIsValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, dispatcher.DefaultConfig().Validate())
}

// TestBadConfigNamesTheField: New refuses a Config out of range before any
// I/O, with a *ConfigError naming the field and what is allowed.
func TestBadConfigNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		edit   func(c *dispatcher.Config)
		field  string
		reason string
	}{
		{"no workers", func(c *dispatcher.Config) { c.Workers = 0 }, "Workers", "must be from 1 to 10000"},
		{"fewer jobs than workers", func(c *dispatcher.Config) { c.Workers, c.MaxJobs = 50, 49 }, "MaxJobs", "must be 0 (3 x workers) or from workers (50) to 30000"},
		{"too many jobs", func(c *dispatcher.Config) { c.MaxJobs = 30001 }, "MaxJobs", "or from workers (100) to 30000"},
		{"request timeout too short", func(c *dispatcher.Config) { c.RequestTimeout = time.Millisecond }, "RequestTimeout", "must be from 100ms to 5m"},
		{"empty schedule", func(c *dispatcher.Config) { c.RetrySchedule = "" }, "RetrySchedule", "parse schedule"},
		{"negative step", func(c *dispatcher.Config) { c.RetrySchedule = "0s,-5s" }, "RetrySchedule", "entry 2: negative delay"},
		{"no metrics address", func(c *dispatcher.Config) { c.MetricsAddr = "" }, "MetricsAddr", "must be set"},
		{"poll faster than the cooldown", func(c *dispatcher.Config) {
			c.FetchPollInterval = time.Millisecond
			c.FetchCooldown = 2 * time.Millisecond
		}, "FetchPollInterval", "must be at least the fetch cooldown"},
		{"rescue before the job timeout", func(c *dispatcher.Config) { c.RescueStuckAfter = 16 * time.Second }, "RescueStuckAfter", "must exceed the request timeout + 5s (20s)"},
		{"fleet share of one", func(c *dispatcher.Config) { c.FleetSuspectShare = 1 }, "FleetSuspectShare", "must be in [0, 1)"},
		{"no heartbeat", func(c *dispatcher.Config) { c.FleetHeartbeat = 0 }, "FleetHeartbeat", "must be from 100ms to 1h"},
		{"operational URL without a secret", func(c *dispatcher.Config) { c.OperationalWebhookURL = "https://ops.example/hooks" }, "OperationalWebhookSecret", "required with the operational webhook URL"},
		{"no grace", func(c *dispatcher.Config) { c.ShutdownGrace = 0 }, "ShutdownGrace", "must be positive"},
		{"tuning every second", func(c *dispatcher.Config) { c.TuneInterval = time.Second }, "TuneInterval", "must be at least 1m"},
		{"no tuning window", func(c *dispatcher.Config) { c.TuneWindow = 0 }, "TuneWindow", "must be at least 1m"},
		{"a shadow of a second", func(c *dispatcher.Config) { c.TuneShadow = time.Second }, "TuneShadow", "must be at least 10s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := dispatcher.DefaultConfig()
			tt.edit(&cfg)
			d, err := dispatcher.New(cfg, dispatcher.Deps{})
			require.Nil(t, d)
			var ce *dispatcher.ConfigError
			require.True(t, errors.As(err, &ce), "a *ConfigError, got %v", err)
			require.Equal(t, tt.field, ce.Field)
			require.Contains(t, ce.Reason, tt.reason)
			require.ErrorContains(t, err, "dispatcher config: "+tt.field+" ")
		})
	}
}

func TestNewNeedsAPool(t *testing.T) {
	t.Parallel()
	_, err := dispatcher.New(dispatcher.DefaultConfig(), dispatcher.Deps{})
	require.EqualError(t, err, "dispatcher: Deps.Pool is required")
}
