// Package telemetrytest lists the metric families a set of collectors
// exports, vectors without a single series yet included, so tests can hold
// dashboards, alert rules and documentation to the real registries.
package telemetrytest

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Family is one metric family as a registry exposes it.
type Family struct {
	Name string
	// Help is its help text.
	Help string
	// Labels are its variable label names, sorted.
	Labels []string
	// Type is counter, gauge, histogram, summary or untyped; "" when the
	// family had no series to tell (a vector nobody has used).
	Type string
}

// Catalogue maps each family name to its family.
type Catalogue map[string]Family

// Recorder is a Registerer that registers on a real registry and keeps
// every collector, so their descriptions can be read.
type Recorder struct {
	Registry   *prometheus.Registry
	collectors []prometheus.Collector
}

var _ prometheus.Registerer = (*Recorder)(nil)

// NewRecorder returns a Recorder over a fresh registry.
func NewRecorder() *Recorder { return &Recorder{Registry: prometheus.NewRegistry()} }

// Register registers c and records it.
func (r *Recorder) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers every c, panicking on an error as a Registry does.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c.
func (r *Recorder) Unregister(c prometheus.Collector) bool {
	r.collectors = slices.DeleteFunc(r.collectors, func(x prometheus.Collector) bool { return x == c })
	return r.Registry.Unregister(c)
}

var (
	fqNameRE = regexp.MustCompile(`fqName: "([^"]*)"`)
	helpRE   = regexp.MustCompile(`help: ("(?:[^"\\]|\\.)*")`)
	labelsRE = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

// Catalogue describes every recorded collector. The names and labels come
// from the collectors' descriptions; the type from a vector's own type (a
// CounterVec holds counters, even before its first series) or else from a
// series (a plain metric always has one).
func (r *Recorder) Catalogue() (Catalogue, error) {
	cat := Catalogue{}
	for _, c := range r.collectors {
		descs := make(chan *prometheus.Desc)
		go func() {
			c.Describe(descs)
			close(descs)
		}()
		for d := range descs {
			s := d.String()
			name, help, labels := fqNameRE.FindStringSubmatch(s), helpRE.FindStringSubmatch(s), labelsRE.FindStringSubmatch(s)
			if name == nil || help == nil || labels == nil {
				return nil, fmt.Errorf("cannot read metric description %s", s)
			}
			f := Family{Name: name[1], Labels: []string{}}
			var err error
			if f.Help, err = strconv.Unquote(help[1]); err != nil {
				return nil, fmt.Errorf("metric description %s: help: %w", s, err)
			}
			for _, l := range strings.Split(labels[1], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					f.Labels = append(f.Labels, l)
				}
			}
			slices.Sort(f.Labels)
			switch c.(type) {
			case *prometheus.CounterVec:
				f.Type = "counter"
			case *prometheus.GaugeVec:
				f.Type = "gauge"
			case *prometheus.HistogramVec:
				f.Type = "histogram"
			case *prometheus.SummaryVec:
				f.Type = "summary"
			}
			cat[f.Name] = f
		}
		metrics := make(chan prometheus.Metric)
		go func() {
			c.Collect(metrics)
			close(metrics)
		}()
		for m := range metrics {
			name := fqNameRE.FindStringSubmatch(m.Desc().String())
			var pb dto.Metric
			if name == nil || m.Write(&pb) != nil {
				continue
			}
			f, ok := cat[name[1]]
			if !ok || f.Type != "" {
				continue
			}
			switch {
			case pb.Counter != nil:
				f.Type = "counter"
			case pb.Gauge != nil:
				f.Type = "gauge"
			case pb.Histogram != nil:
				f.Type = "histogram"
			case pb.Summary != nil:
				f.Type = "summary"
			default:
				f.Type = "untyped"
			}
			cat[name[1]] = f
		}
	}
	return cat, nil
}

// Names returns every family name, sorted.
func (c Catalogue) Names() []string { return slices.Sorted(maps.Keys(c)) }

// Series returns the family a PromQL series name reads: the family itself,
// or for a histogram's _bucket, _sum and _count (a summary's _sum and
// _count) the histogram; le is then one more label.
func (c Catalogue) Series(name string) (f Family, ok bool) {
	if f, ok := c[name]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, cut := strings.CutSuffix(name, suffix)
		if !cut {
			continue
		}
		f, ok := c[base]
		switch {
		case !ok:
		case f.Type == "histogram" && suffix == "_bucket":
			f.Labels = append(slices.Clone(f.Labels), "le")
			return f, true
		case (f.Type == "histogram" || f.Type == "summary") && suffix != "_bucket":
			return f, true
		}
	}
	return Family{}, false
}
