package deploy_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/hookd/hookd/deploy"
)

// promtool runs promtool from Debian's prometheus package, which .ci/run
// installs: a missing promtool fails the test rather than skipping it.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is needed for the alert rule tests: apt-get install prometheus (.ci/run installs it)")
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
}

func TestPromtoolChecksAlertRules(t *testing.T) {
	t.Parallel()
	promtool(t, "check", "rules", "prometheus/alerts.yml")
}

// TestPromtoolAlertRuleTests: the divergence alert fires on synthetic
// series and stays silent on real outages (5xx and timeouts); the median
// time-in-open, backlog and fleet-suspect alerts fire when they should.
func TestPromtoolAlertRuleTests(t *testing.T) {
	t.Parallel()
	promtool(t, "test", "rules", "prometheus/alerts_test.yml")
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
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

// TestAlertRulesReadExportedMetrics: every series an alert reads is one the
// binaries export, with the labels it matches on; every alert has a
// severity and a summary, and each has a promtool test. The synthetic
// series of the tests are shaped like the real ones too.
func TestAlertRulesReadExportedMetrics(t *testing.T) {
	t.Parallel()
	series := exportedSeries(t)
	var rules ruleFile
	decodeYAML(t, "prometheus/alerts.yml", &rules)
	var tests ruleTestFile
	decodeYAML(t, "prometheus/alerts_test.yml", &tests)
	require.Equal(t, []string{"alerts.yml"}, tests.RuleFiles)

	tested := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTests {
			tested[a.Alertname] = true
		}
		for _, in := range tc.InputSeries {
			require.Empty(t, deploy.CheckPromQL(in.Series, series), "test %q: input series %s", tc.Name, in.Series)
		}
	}
	var alerts []string
	var errs []error
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, err := range deploy.CheckPromQL(r.Expr, series) {
				errs = append(errs, fmt.Errorf("alert %s: %w", r.Alert, err))
			}
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.True(t, tested[r.Alert], "alert %s has no promtool test in alerts_test.yml", r.Alert)
		}
	}
	require.NoError(t, errors.Join(errs...))
	require.ElementsMatch(t, []string{
		"BreakerOpenedWithoutErrorRise", "BreakerTimeInOpenFarAboveOpenDuration", "BreakerFleetSuspect",
		"WebhookDeliveryBacklogAging", "WebhookDeliveryBacklogStale",
	}, alerts)
}

// TestAlertRuleCheckCatchesUnknownMetrics: the check above is not vacuous.
func TestAlertRuleCheckCatchesUnknownMetrics(t *testing.T) {
	t.Parallel()
	series := exportedSeries(t)
	require.Empty(t, deploy.CheckPromQL(`sum by (endpoint) (increase(breaker_open_total[15m]))`, series))
	require.NotEmpty(t, deploy.CheckPromQL(`sum by (endpoint) (increase(breaker_opened_total[15m]))`, series))
	require.NotEmpty(t, deploy.CheckPromQL(`webhook_delivery_total{status="500"}`, series))
	require.NotEmpty(t, deploy.CheckPromQL(`webhook_delivery_duration_seconds_bucket{endpoint="x"}`, series))
	require.Empty(t, deploy.CheckPromQL(`webhook_delivery_duration_seconds_bucket{le="1"}`, series))
	require.Empty(t, deploy.CheckPromQL(`sum by (route) (rate(http_requests_total{status=~"5.."}[5m]))`, series))
}
