package deploycheck

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Selector is one series selector of a PromQL expression: the metric it
// reads and the label names its matchers use.
type Selector struct {
	Metric string
	Labels []string
}

// Selectors parses expr with Prometheus' own parser and returns its series
// selectors.
func Selectors(expr string) ([]Selector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var out []Selector
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		s, err := selector(vs.Name, vs.LabelMatchers)
		if err != nil {
			bad = err
		}
		out = append(out, s)
		return nil
	})
	return out, bad
}

// SeriesSelector parses a promtool test's input series, such as
// webhook_delivery_total{endpoint="a",outcome="success"}.
func SeriesSelector(series string) (Selector, error) {
	ls, err := parser.NewParser(parser.Options{}).ParseMetric(series)
	if err != nil {
		return Selector{}, fmt.Errorf("parse series %q: %w", series, err)
	}
	s := Selector{Metric: ls.Get(model.MetricNameLabel)}
	ls.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel {
			s.Labels = append(s.Labels, l.Name)
		}
	})
	return s, nil
}

func selector(name string, ms []*labels.Matcher) (Selector, error) {
	s := Selector{Metric: name}
	for _, m := range ms {
		if m.Name != model.MetricNameLabel {
			s.Labels = append(s.Labels, m.Name)
		} else if m.Type == labels.MatchEqual {
			s.Metric = m.Value
		}
	}
	if s.Metric == "" {
		return s, errors.New("a selector without a metric name cannot be checked")
	}
	return s, nil
}

// TargetLabels are the labels Prometheus adds to every scraped series
// (job, instance) and those the Kubernetes pod scrape configs add; a
// selector may match on them whatever the metric.
var TargetLabels = []string{"job", "instance", "namespace", "pod"}

// CheckSelectors checks that every selector reads a series hookd exports
// and matches only labels that series has (or TargetLabels). exported
// returns the label names of the family a series name belongs to (a
// histogram's _bucket has le), and whether there is one.
func CheckSelectors(sels []Selector, exported func(name string) (labels []string, ok bool)) []error {
	var errs []error
	for _, s := range sels {
		have, ok := exported(s.Metric)
		if !ok {
			errs = append(errs, fmt.Errorf("%s is not a series hookd exports", s.Metric))
			continue
		}
		for _, l := range s.Labels {
			if !slices.Contains(have, l) && !slices.Contains(TargetLabels, l) {
				errs = append(errs, fmt.Errorf("%s has no label %s (it has %v)", s.Metric, l, have))
			}
		}
	}
	return errs
}
