package deploy_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
)

func TestPromQLSelectors(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]deploy.Selector{
		`up`: {{Metric: "up"}},
		`sum by (endpoint) (rate(webhook_delivery_total{outcome="failure", endpoint=~"ep_.*"}[5m]))`: {
			{Metric: "webhook_delivery_total", Labels: []string{"outcome", "endpoint"}},
		},
		`histogram_quantile(0.5, sum by (class, le) (rate(breaker_open_duration_seconds_bucket[6h])))
		  > on (class) group_left 3 * max without (instance) (breaker_class_open_duration_seconds offset 5m)`: {
			{Metric: "breaker_open_duration_seconds_bucket"},
			{Metric: "breaker_class_open_duration_seconds"},
		},
		`sum(rate(a_total[$__rate_interval])) by (route) / ignoring(status) sum(b{route="$route"}) # b is a gauge`: {
			{Metric: "a_total"}, {Metric: "b", Labels: []string{"route"}},
		},
		`{__name__="go_goroutines", job!="x"} and bool 1e-3 < count_values("v", topk(5, c:recorded))`: {
			{Metric: "go_goroutines", Labels: []string{"job"}}, {Metric: "c:recorded"},
		},
		`label_replace(vector(1), "dst", "$1", "src", "(.*)") or on() absent(d{e='f\'g'})`: {
			{Metric: "d", Labels: []string{"e"}},
		},
	} {
		got, err := deploy.PromQLSelectors(expr)
		require.NoError(t, err, expr)
		for i := range got {
			if got[i].Labels == nil {
				got[i].Labels = []string{}
			}
		}
		for i := range want {
			if want[i].Labels == nil {
				want[i].Labels = []string{}
			}
		}
		require.Equal(t, want, got, expr)
	}
	for _, bad := range []string{`a{b="c"`, `a{b}`, `a{b=c}`, `rate(a[5m)`, `a{b="c}`, `{job="x"}`} {
		_, err := deploy.PromQLSelectors(bad)
		require.Error(t, err, bad)
	}
}

func TestCheckPromQL(t *testing.T) {
	t.Parallel()
	series := func(name string) ([]string, bool) {
		switch name {
		case "webhook_delivery_total":
			return []string{"endpoint", "outcome"}, true
		case "breaker_open_duration_seconds_bucket":
			return []string{"class", "le"}, true
		}
		return nil, false
	}
	require.Empty(t, deploy.CheckPromQL(`sum by (endpoint) (rate(webhook_delivery_total{outcome="failure",instance="d1"}[5m]))`, series))
	require.Empty(t, deploy.CheckPromQL(`histogram_quantile(0.9, sum by (le) (rate(breaker_open_duration_seconds_bucket{le!=""}[1h])))`, series))
	errs := deploy.CheckPromQL(`rate(webhook_delivery_totl[5m]) + rate(webhook_delivery_total{status="500"}[5m])`, series)
	require.ErrorContains(t, errors.Join(errs...), "webhook_delivery_totl is not a metric hookd exports")
	require.ErrorContains(t, errors.Join(errs...), "webhook_delivery_total has no label status")
	require.NotEmpty(t, deploy.CheckPromQL(`vector(1)`, series), "an expression reading nothing names no metric")
}
