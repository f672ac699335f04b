package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock advances by step every time it is read.
type fakeClock struct {
	now  time.Time
	step time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.now = c.now.Add(c.step)
	return c.now
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		terminal bool
		step     time.Duration
		want     string
	}{
		{"quick work prints nothing", true, time.Millisecond, ""},
		{"quick work prints nothing off a terminal", false, 100 * time.Millisecond, ""},
		{"terminal redraws in place", true, 300 * time.Millisecond,
			"\rreplay [######........................]  20% 200/1000 rows 600ms" +
				"\rreplay [#########.....................]  30% 300/1000 rows 900ms" +
				"\rreplay [############..................]  40% 400/1000 rows 1.2s" +
				"\rreplay [##############################] 100% 1000/1000 rows 1.5s\n"},
		{"elsewhere a line every few seconds", false, 2 * time.Second,
			"replay:  20% (200/1000 rows, 4s)\n" +
				"replay: 100% (1000/1000 rows, 10s)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			clock := &fakeClock{now: time.Unix(0, 0), step: tt.step}
			bar := newProgressBar(&out, tt.terminal, clock.Now, "replay", 1000)
			for range 4 {
				bar.Add(100)
			}
			bar.Finish()
			require.Equal(t, tt.want, out.String())
		})
	}
}

// TestProgressNeverGarblesJSON: with a slow clock the bar is drawn, on
// stderr only, and stdout stays one JSON document.
func TestProgressNeverGarblesJSON(t *testing.T) {
	t.Parallel()
	rows, err := Synth(SynthConfig{RPS: 1000, Phases: []Phase{{Name: "a", Duration: 5 * time.Minute, FailureRate: 0.1}}, Spacing: SpacingFixed, Seed: 1})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "big.csv")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, WriteTrace(f, rows))
	require.NoError(t, f.Close())

	var stdout, stderr bytes.Buffer
	clock := &fakeClock{now: time.Unix(0, 0), step: time.Second}
	cmd := command{getenv: func(string) string { return "" }, stdout: &stdout, stderr: &stderr, now: clock.Now, terminal: true}
	require.NoError(t, cmd.replay(context.Background(), []string{"--trace", path, "--json"}))
	require.True(t, json.Valid(stdout.Bytes()), stdout.String())
	require.Contains(t, stderr.String(), "\rreplay [")
	require.True(t, strings.HasSuffix(stderr.String(), "100% 300000/300000 rows 6s\n"), stderr.String())
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	require.False(t, isTerminal(&bytes.Buffer{}))
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f))
}
