package tuning

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the tuner's series: what the shadows cost the process that
// advances them.
type Metrics struct {
	// ShadowSeconds is hookd_tuning_shadow_seconds_total.
	ShadowSeconds prometheus.Counter
	// ShadowOutcomes is hookd_tuning_shadow_outcomes_total.
	ShadowOutcomes prometheus.Counter
}

// NewMetrics registers the tuner's series on reg (none when reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ShadowSeconds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_tuning_shadow_seconds_total",
			Help: "Wall time the tuning leader spent advancing shadows: reading the log, feeding the shadow breakers, judging and storing them, PostgreSQL's replies included.",
		}),
		ShadowOutcomes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_tuning_shadow_outcomes_total",
			Help: "Logged outcomes the tuning leader fed to shadow breakers.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.ShadowSeconds, m.ShadowOutcomes)
	}
	return m
}
