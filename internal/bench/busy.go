package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A bench run on a machine already busy measures the other work as much as
// hookd: its figures are not comparable with a quiet run's. A full run
// refuses to start while the machine is busy, unless told to (-busy-ok),
// and records the load it saw while it ran.
const (
	// busyLoadAvg is the 1-minute load average above which the machine
	// counts as busy.
	busyLoadAvg = 1.0
	// busyCores is the cores other processes may keep busy at the start.
	busyCores = 0.5
	// busySample is how long the start's CPU use is sampled.
	busySample = 2 * time.Second
)

// machineBusy reports why the machine is too busy for a comparable run, or
// "" when it is quiet: its 1-minute load average, and the cores in use
// over busySample (the bench itself is idle meanwhile).
func machineBusy(ctx context.Context) (string, error) {
	load, err := loadAvg1()
	if err != nil {
		return "", err
	}
	used, err := coresInUse(ctx, busySample)
	if err != nil {
		return "", err
	}
	var why []string
	if load > busyLoadAvg {
		why = append(why, fmt.Sprintf("load average %.2f (above %.1f)", load, busyLoadAvg))
	}
	if used > busyCores {
		why = append(why, fmt.Sprintf("%.2f cores in use by other processes (above %.1f)", used, busyCores))
	}
	return strings.Join(why, ", "), nil
}

// loadAvg1 is the 1-minute load average.
func loadAvg1() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("read load average: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("read load average: empty")
	}
	return strconv.ParseFloat(f[0], 64)
}

// cpuTicks reads the machine's busy and total CPU ticks (/proc/stat).
func cpuTicks() (busy, total float64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("read cpu times: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("read cpu times: unexpected %q", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("read cpu times: %w", err)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// coresInUse is the cores the machine kept busy over d.
func coresInUse(ctx context.Context, d time.Duration) (float64, error) {
	b0, t0, err := cpuTicks()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	b1, t1, err := cpuTicks()
	if err != nil {
		return 0, err
	}
	if t1 <= t0 {
		return 0, nil
	}
	return (b1 - b0) / (t1 - t0) * float64(numCPU()), nil
}

// loadRecorder samples the 1-minute load average while a run lasts.
type loadRecorder struct {
	mu      sync.Mutex
	samples []float64
	stop    chan struct{}
	done    chan struct{}
}

// recordLoad samples the load average every interval until stopped.
func recordLoad(interval time.Duration) *loadRecorder {
	l := &loadRecorder{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if v, err := loadAvg1(); err == nil {
				l.mu.Lock()
				l.samples = append(l.samples, v)
				l.mu.Unlock()
			}
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
		}
	}()
	return l
}

// finish stops the sampling and returns the mean and the highest load
// average seen.
func (l *loadRecorder) finish() (mean, peak float64) {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.samples {
		mean += v
		peak = max(peak, v)
	}
	if len(l.samples) > 0 {
		mean /= float64(len(l.samples))
	}
	return math.Round(mean*100) / 100, peak
}
