package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// profileSeconds is the length of the CPU profiles -profile collects.
const profileSeconds = 20

// startProfiles collects a CPU profile of the stage's api and of each of its
// dispatchers over the next profileSeconds (net/http/pprof on their metrics
// listeners, served with PPROF=true), writing DIR/<stage>-<process>.pprof
// and the top 10 functions by cumulative and flat CPU beside it. The
// returned wait blocks until every profile is written. Without -profile it
// does nothing.
func (s *stage) startProfiles(ctx context.Context) (wait func()) {
	dir := s.b.opts.profile
	if dir == "" {
		return func() {}
	}
	type target struct{ name, base, binary string }
	var targets []target
	if s.api != nil {
		targets = append(targets, target{s.api.name, strings.TrimSuffix(s.api.match(apiMetricsRE)[1], "/metrics"), s.b.apiBin})
	}
	for _, d := range s.dispatchers {
		targets = append(targets, target{d.name, d.match(dispatcherMetrics)[1], s.b.dispatcherBin})
	}
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			path := filepath.Join(dir, t.name+".pprof")
			if err := fetchProfile(ctx, t.base+fmt.Sprintf("/debug/pprof/profile?seconds=%d", profileSeconds), path); err != nil {
				s.b.logger.Warn("bench_profile", slog.String("process", t.name), slog.String("error", err.Error()))
				return
			}
			if err := topOfProfile(ctx, t.binary, path); err != nil {
				s.b.logger.Warn("bench_profile_top", slog.String("process", t.name), slog.String("error", err.Error()))
			}
		})
	}
	return wg.Wait
}

// fetchProfile writes the profile url answers to path.
func fetchProfile(ctx context.Context, url, path string) error {
	ctx, cancel := context.WithTimeout(ctx, (profileSeconds+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("profile request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("fetch profile: %s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write profile: %w", err)
	}
	return f.Close()
}

// topOfProfile writes the top 10 functions of a CPU profile, by flat time,
// by cumulative time among hookd's own functions (the cumulative top of
// all is net/http's and River's frames around them) and by cumulative
// time, to the profile's path with .txt for .pprof.
func topOfProfile(ctx context.Context, binary, path string) error {
	var out strings.Builder
	views := []struct{ title, args string }{
		{"flat", "-flat"},
		{"cumulative, hookd's own functions", "-cum -show=github.com/hookd/"},
		{"cumulative", "-cum"},
	}
	for _, v := range views {
		args := append([]string{"tool", "pprof", "-top", "-nodecount=10"}, strings.Fields(v.args)...)
		cmd := exec.CommandContext(ctx, "go", append(args, binary, path)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go tool pprof: %w\n%s", err, b)
		}
		fmt.Fprintf(&out, "== top 10 by %s\n%s\n", v.title, b)
	}
	return os.WriteFile(strings.TrimSuffix(path, ".pprof")+".txt", []byte(out.String()), 0o644)
}

// writeStatements writes the stage's statements of a probe (the top 10 by
// total time, with calls, mean time and WAL bytes) to DIR/<name>-statements.txt.
func (s *stage) writeStatements(name string, top []statement) {
	dir := s.b.opts.profile
	if dir == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintln(&b, "| role | calls | total ms | mean ms | WAL bytes | WAL bytes/call | full-page images | statement |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---|")
	for i, st := range top {
		if i == 10 {
			break
		}
		perCall := 0.0
		if st.Calls > 0 {
			perCall = float64(st.WALBytes) / float64(st.Calls)
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.3f | %d | %.0f | %d | `%s` |\n", st.Role, st.Calls, st.TotalMs, st.MeanMs, st.WALBytes, perCall, st.WALFPI, strings.ReplaceAll(st.Query, "|", "\\|"))
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-statements.md"), []byte(b.String()), 0o644); err != nil {
		s.b.logger.Warn("bench_statements", slog.String("error", err.Error()))
	}
}
