package replay_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
)

// benchTrace is the reference simulation's 100 s trace repeated ten times: 100,000 rows at
// 100 rps with outages, degraded periods and healthy traffic, so the
// breaker spends time in every state.
func benchTrace(b *testing.B) []replay.Row {
	b.Helper()
	var phases []replay.Phase
	for range 10 {
		phases = append(phases, referencePhases()...)
	}
	rows, err := replay.Synth(replay.SynthConfig{RPS: 100, Phases: phases, Spacing: replay.SpacingPoisson, Seed: 1})
	require.NoError(b, err)
	return rows
}

// BenchmarkReplay measures replay throughput in rows per second: one
// Allow and, for a sent row, one Record of the real breaker per row.
func BenchmarkReplay(b *testing.B) {
	rows := benchTrace(b)
	rate := referenceConfig(breaker.TripRate, 5, 0.5, 10*time.Second)
	rate.HalfOpenTrials, rate.OpenJitter = 3, 0.3
	consecutive := referenceConfig(breaker.TripConsecutive, 5, 0.5, 30*time.Second)
	for _, bc := range []struct {
		name string
		cfg  breaker.Config
	}{{"rate", rate}, {"consecutive", consecutive}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := replay.Replay(bc.cfg, rows, replay.Options{Seed: 1}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkParseTrace measures reading a CSV trace, in rows per second.
func BenchmarkParseTrace(b *testing.B) {
	rows := benchTrace(b)
	var buf bytes.Buffer
	require.NoError(b, replay.WriteTrace(&buf, rows))
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := replay.ParseTrace(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkSweep measures the default grid's 27-config sweep over the trace as
// quiet and incident traces, in replayed rows per second on every core.
func BenchmarkSweep(b *testing.B) {
	rows := benchTrace(b)
	configs := replay.DefaultGrid().Configs(breaker.DefaultConfig())
	for b.Loop() {
		if _, err := replay.Sweep(configs, rows, rows, replay.SweepOptions{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(2*len(configs)*len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
