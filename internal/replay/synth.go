package replay

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hookd/hookd/internal/breaker"
)

// Phase is one stretch of a synthetic trace: its label, its length, and the
// probability that each of its requests fails.
type Phase struct {
	// Name labels the phase's rows.
	Name string
	// Duration is how long the phase lasts.
	Duration time.Duration
	// FailureRate is the probability, in [0, 1], that a request fails; the
	// others succeed.
	FailureRate float64
}

// ParsePhase parses "name:duration:failure probability", such as
// "outage:10s:1" or "base:30s:0.02".
func ParsePhase(s string) (Phase, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Phase{}, fmt.Errorf("phase %q: want name:duration:failure probability, such as base:30s:0.02", s)
	}
	p := Phase{Name: parts[0]}
	if p.Name == "" || strings.ContainsFunc(p.Name, unicode.IsControl) {
		return Phase{}, fmt.Errorf("phase %q: the name must be non-empty text", s)
	}
	d, err := time.ParseDuration(parts[1])
	if err != nil || d <= 0 {
		return Phase{}, fmt.Errorf("phase %q: duration %q must be a positive Go duration such as 30s", s, parts[1])
	}
	p.Duration = d
	f, err := strconv.ParseFloat(parts[2], 64)
	if err != nil || !(f >= 0 && f <= 1) {
		return Phase{}, fmt.Errorf("phase %q: failure probability %q must be a number from 0 to 1", s, parts[2])
	}
	p.FailureRate = f
	return p, nil
}

// String returns p in the form ParsePhase reads.
func (p Phase) String() string {
	return p.Name + ":" + p.Duration.String() + ":" + strconv.FormatFloat(p.FailureRate, 'g', -1, 64)
}

// Spacing is how a synthetic trace spaces its requests in time.
type Spacing string

const (
	// SpacingFixed spaces requests exactly 1/rps apart from each phase's
	// start.
	SpacingFixed Spacing = "fixed"
	// SpacingPoisson draws exponential gaps of mean 1/rps: a Poisson
	// arrival process.
	SpacingPoisson Spacing = "poisson"
)

// MaxSynthRows bounds the size of a synthetic trace.
const MaxSynthRows = 100_000_000

// SynthConfig describes a synthetic trace.
type SynthConfig struct {
	// RPS is the request rate, in requests per second.
	RPS float64
	// Phases follow each other from time 0.
	Phases []Phase
	// Spacing is SpacingFixed or SpacingPoisson.
	Spacing Spacing
	// Seed seeds the draws of outcomes and gaps.
	Seed uint64
}

// Synth returns the rows of a synthetic trace, the same for the same config.
// Each phase starts where the previous one ended, the first at 0, and each
// request fails with its phase's probability, independently of the others.
func Synth(c SynthConfig) ([]Row, error) {
	if !(c.RPS > 0) || math.IsInf(c.RPS, 1) {
		return nil, errors.New("rps must be a positive number")
	}
	if len(c.Phases) == 0 {
		return nil, errors.New("at least one phase is required")
	}
	if c.Spacing != SpacingFixed && c.Spacing != SpacingPoisson {
		return nil, fmt.Errorf("spacing %q must be %q or %q", c.Spacing, SpacingFixed, SpacingPoisson)
	}
	var total time.Duration
	for _, p := range c.Phases {
		if total > math.MaxInt64-p.Duration {
			return nil, errors.New("the phases are too long")
		}
		total += p.Duration
	}
	expected := total.Seconds() * c.RPS
	if expected > MaxSynthRows {
		return nil, fmt.Errorf("%.0f rows expected: at most %d", expected, MaxSynthRows)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x7472616365000000)) // "trace"
	rows := make([]Row, 0, int(expected*1.01)+16)
	gap := float64(time.Second) / c.RPS
	var start time.Duration
	for _, p := range c.Phases {
		end := start + p.Duration
		if c.Spacing == SpacingFixed {
			for i := 0; ; i++ {
				ts := start + time.Duration(math.Round(float64(i)*gap))
				if ts >= end {
					break
				}
				rows = append(rows, Row{TS: ts, Outcome: draw(rng, p.FailureRate), Phase: p.Name})
			}
		} else {
			at := float64(start)
			for {
				at += rng.ExpFloat64() * gap
				ts := time.Duration(math.Round(at))
				if at >= float64(end) || ts >= end {
					break
				}
				rows = append(rows, Row{TS: ts, Outcome: draw(rng, p.FailureRate), Phase: p.Name})
			}
		}
		start = end
	}
	return rows, nil
}

func draw(rng *rand.Rand, failureRate float64) breaker.Outcome {
	if rng.Float64() < failureRate {
		return breaker.OutcomeFailure
	}
	return breaker.OutcomeSuccess
}
