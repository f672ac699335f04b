package e2e

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

// metricValue sums the samples of a /metrics page that series selects (a
// PromQL selector, `name{label="value"}`); none is 0. The page is read
// by Prometheus's text parser and the selector by its PromQL parser, so a
// series whose labels are written in another order, or that gains a
// label, is still found: a hand-matched line prefix found nothing then,
// and a test asserting zero passed without reading anything. A
// histogram's _count and _sum are its count and sum.
func metricValue(t *testing.T, metricsURL, series string) float64 {
	t.Helper()
	matchers, err := parser.NewParser(parser.Options{}).ParseMetricSelector(series)
	require.NoError(t, err, "selector %s", series)
	resp, err := http.Get(metricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := expfmt.NewTextParser(model.UTF8Validation)
	families, err := page.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	var total float64
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for sample, v := range samplesOf(name, f.GetType(), m) {
				b := labels.NewBuilder(labels.EmptyLabels()).Set(labels.MetricName, sample)
				for _, l := range m.GetLabel() {
					b.Set(l.GetName(), l.GetValue())
				}
				lset := b.Labels()
				if matchesAll(matchers, lset) {
					total += v
				}
			}
		}
	}
	return total
}

// samplesOf is a metric's samples by name: its value, or a histogram's
// or summary's count and sum.
func samplesOf(name string, typ dto.MetricType, m *dto.Metric) map[string]float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return map[string]float64{name: m.GetCounter().GetValue()}
	case dto.MetricType_GAUGE:
		return map[string]float64{name: m.GetGauge().GetValue()}
	case dto.MetricType_HISTOGRAM:
		return map[string]float64{name + "_count": float64(m.GetHistogram().GetSampleCount()), name + "_sum": m.GetHistogram().GetSampleSum()}
	case dto.MetricType_SUMMARY:
		return map[string]float64{name + "_count": float64(m.GetSummary().GetSampleCount()), name + "_sum": m.GetSummary().GetSampleSum()}
	default:
		return map[string]float64{name: m.GetUntyped().GetValue()}
	}
}

func matchesAll(ms []*labels.Matcher, lset labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}
