//go:build !race

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/hookd/hookd/internal/deploycheck"
	"github.com/hookd/hookd/internal/telemetry"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

// exported returns, for a series name, the labels of the family the
// dispatcher or the api exports it in. The api's own families are
// telemetry.NewHTTPMetrics' (cmd/api's generated docs list them).
func exported(t *testing.T) func(name string) ([]string, bool) {
	t.Helper()
	rec := telemetrytest.NewRecorder()
	telemetry.NewHTTPMetrics(rec)
	api, err := rec.Catalogue()
	require.NoError(t, err)
	cats := []telemetrytest.Catalogue{catalogue(t), api}
	return func(name string) ([]string, bool) {
		for _, c := range cats {
			if f, ok := c.Series(name); ok {
				return f.Labels, true
			}
		}
		return nil, false
	}
}

// promtool runs promtool from Debian's prometheus package, which
// deploy/test-deps.sh installs: a missing promtool fails the test rather
// than skipping it.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is needed for the alert rule tests: apt-get install prometheus (deploy/test-deps.sh installs it)")
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
}

const (
	alertsFile     = "../../deploy/prometheus/alerts.yml"
	alertTestsFile = "../../deploy/prometheus/alerts_test.yml"
	dashboardFile  = "../../deploy/grafana/hookd.json"
)

func TestPromtoolChecksAlertRules(t *testing.T) {
	t.Parallel()
	promtool(t, "check", "rules", alertsFile)
}

// TestPromtoolAlertRuleTests runs the rules' unit tests: the divergence
// alert fires on synthetic series and stays silent on real outages (5xx
// and timeouts); the median time-in-open, backlog and fleet-suspect alerts
// fire when they should.
func TestPromtoolAlertRuleTests(t *testing.T) {
	t.Parallel()
	promtool(t, "test", "rules", alertTestsFile)
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTestFile struct {
	Tests []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTests []struct {
			Alertname string `yaml:"alertname"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func decodeYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, v), file)
}

// TestAlertRulesReadExportedSeries: every series an alert reads is one the
// binaries export, with the labels it matches on, and every alert has a
// promtool test whose input series are shaped like the real ones.
func TestAlertRulesReadExportedSeries(t *testing.T) {
	t.Parallel()
	series := exported(t)
	var rules ruleFile
	decodeYAML(t, alertsFile, &rules)
	var tests ruleTestFile
	decodeYAML(t, alertTestsFile, &tests)

	var errs []error
	tested := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTests {
			tested[a.Alertname] = true
		}
		for _, in := range tc.InputSeries {
			s, err := deploycheck.SeriesSelector(in.Series)
			require.NoError(t, err)
			for _, err := range deploycheck.CheckSelectors([]deploycheck.Selector{s}, series) {
				errs = append(errs, fmt.Errorf("test %q: input series %s: %w", tc.Name, in.Series, err))
			}
		}
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			sels, err := deploycheck.Selectors(r.Expr)
			require.NoError(t, err, "alert %s", r.Alert)
			require.NotEmpty(t, sels, "alert %s reads no series", r.Alert)
			for _, err := range deploycheck.CheckSelectors(sels, series) {
				errs = append(errs, fmt.Errorf("alert %s: %w", r.Alert, err))
			}
			require.True(t, tested[r.Alert], "alert %s has no promtool test in alerts_test.yml", r.Alert)
		}
	}
	require.NotZero(t, alerts)
	require.NoError(t, errors.Join(errs...))
}

// TestSeriesCheckCatchesRenames: the checks above fail on a renamed
// series or a label the family does not have.
func TestSeriesCheckCatchesRenames(t *testing.T) {
	t.Parallel()
	series := exported(t)
	check := func(expr string) error {
		sels, err := deploycheck.Selectors(expr)
		require.NoError(t, err, expr)
		return errors.Join(deploycheck.CheckSelectors(sels, series)...)
	}
	require.NoError(t, check(`sum by (endpoint) (increase(breaker_open_total[15m]))`))
	require.ErrorContains(t, check(`sum by (endpoint) (increase(breaker_opened_total[15m]))`), "breaker_opened_total is not a series hookd exports")
	require.ErrorContains(t, check(`webhook_delivery_total{status="500"}`), "webhook_delivery_total has no label status")
	require.ErrorContains(t, check(`webhook_delivery_duration_seconds_bucket{endpoint="x"}`), "has no label endpoint")
	require.NoError(t, check(`webhook_delivery_duration_seconds_bucket{le="1", instance="d1"}`))
	require.NoError(t, check(`sum by (route) (rate(http_requests_total{status=~"5.."}[5m]))`))
	require.NoError(t, check(`{__name__="go_goroutines", job="hookd"}`))
	_, err := deploycheck.Selectors(`rate(webhook_delivery_total[5m)`)
	require.Error(t, err, "Prometheus' parser refuses a broken expression")
}

// labelValues is a Grafana query variable's definition.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// TestGrafanaDashboardReadsExportedSeries: every panel expression parses
// as PromQL and reads only series the binaries export, with labels they
// have; so does every query variable.
func TestGrafanaDashboardReadsExportedSeries(t *testing.T) {
	t.Parallel()
	d, err := deploycheck.LoadDashboard(dashboardFile)
	require.NoError(t, err)
	series := exported(t)
	exprs := d.Exprs()
	require.NotEmpty(t, exprs)
	var errs []error
	for title, es := range exprs {
		for _, e := range es {
			sels, err := deploycheck.Selectors(e)
			if err != nil {
				errs = append(errs, fmt.Errorf("panel %q: %w", title, err))
				continue
			}
			if len(sels) == 0 {
				errs = append(errs, fmt.Errorf("panel %q: %q reads no series", title, e))
			}
			for _, err := range deploycheck.CheckSelectors(sels, series) {
				errs = append(errs, fmt.Errorf("panel %q: %w", title, err))
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(v.Definition))
		require.NotNil(t, m, "variable %s: want label_values(selector, label), got %q", v.Name, v.Definition)
		sels, err := deploycheck.Selectors(m[1])
		require.NoError(t, err, "variable %s", v.Name)
		sels[0].Labels = append(sels[0].Labels, m[2])
		for _, err := range deploycheck.CheckSelectors(sels, series) {
			errs = append(errs, fmt.Errorf("variable %s: %w", v.Name, err))
		}
	}
	require.NoError(t, errors.Join(errs...))
}
