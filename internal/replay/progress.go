package replay

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress bar timing: on a terminal the bar appears once work has run for
// terminalAfter and is redrawn in place every terminalEvery; elsewhere (a
// log file, a CI job) a plain line is printed every plainEvery once work has
// run for plainAfter, so short runs print nothing.
const (
	terminalAfter = 500 * time.Millisecond
	terminalEvery = 100 * time.Millisecond
	plainAfter    = 3 * time.Second
	plainEvery    = 5 * time.Second
)

// progressBar reports replayed rows out of a known total on stderr, never on
// stdout, so it cannot garble a --json report.
type progressBar struct {
	w        io.Writer
	terminal bool
	now      func() time.Time
	label    string
	total    int64

	mu    sync.Mutex
	start time.Time
	done  int64
	drawn time.Time
	shown bool
}

func newProgressBar(w io.Writer, terminal bool, now func() time.Time, label string, total int64) *progressBar {
	return &progressBar{w: w, terminal: terminal, now: now, label: label, total: max(total, 1), start: now()}
}

// Add counts rows more rows done; it is safe for concurrent use.
func (p *progressBar) Add(rows int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(rows)
	now := p.now()
	after, every := plainAfter, plainEvery
	if p.terminal {
		after, every = terminalAfter, terminalEvery
	}
	if now.Sub(p.start) < after || (p.shown && now.Sub(p.drawn) < every) {
		return
	}
	p.drawLocked(now)
}

// Finish draws the bar complete and ends its line, if it was ever shown.
func (p *progressBar) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.shown {
		return
	}
	p.done = p.total
	p.drawLocked(p.now())
	if p.terminal {
		fmt.Fprintln(p.w)
	}
}

func (p *progressBar) drawLocked(now time.Time) {
	p.shown, p.drawn = true, now
	frac := min(float64(p.done)/float64(p.total), 1)
	elapsed := now.Sub(p.start).Truncate(100 * time.Millisecond)
	if !p.terminal {
		fmt.Fprintf(p.w, "%s: %3.0f%% (%d/%d rows, %s)\n", p.label, 100*frac, p.done, p.total, elapsed)
		return
	}
	const width = 30
	filled := int(frac * width)
	fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f%% %d/%d rows %s", p.label,
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*frac, p.done, p.total, elapsed)
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
