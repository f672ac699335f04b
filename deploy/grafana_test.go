package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/hookd/hookd/deploy"
)

type grafanaPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaDashboard struct {
	Title         string         `json:"title"`
	UID           string         `json:"uid"`
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaExprs returns every PromQL expression of the dashboard by panel
// title, failing on a panel without targets or with an empty expression.
func grafanaExprs(t *testing.T, d grafanaDashboard) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	ids := map[int]bool{}
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			require.NotZero(t, p.ID, "panel %q has no id", p.Title)
			require.False(t, ids[p.ID], "panel id %d is used twice", p.ID)
			ids[p.ID] = true
			require.NotNil(t, p.GridPos, "panel %q has no gridPos", p.Title)
			require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "panel %q is wider than the grid", p.Title)
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			require.NotEmpty(t, p.Title, "panel %d has no title", p.ID)
			require.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
			for _, tg := range p.Targets {
				require.NotEmpty(t, strings.TrimSpace(tg.Expr), "panel %q target %s has no expression", p.Title, tg.RefID)
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
		}
	}
	walk(d.Panels)
	return out
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/hookd.json")
	require.NoError(t, err)
	var d grafanaDashboard
	require.NoError(t, json.Unmarshal(b, &d))
	require.Equal(t, "hookd", d.Title)
	require.NotEmpty(t, d.UID)
	require.Positive(t, d.SchemaVersion)
	return d
}

// TestGrafanaDashboardReadsExportedMetrics: the dashboard parses, and every
// expression (panels and template variables) names only series the binaries
// really export, with labels they have.
func TestGrafanaDashboardReadsExportedMetrics(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	series := exportedSeries(t)
	exprs := grafanaExprs(t, d)
	require.NotEmpty(t, exprs)

	var errs []error
	read := map[string]bool{}
	for title, es := range exprs {
		for _, e := range es {
			for _, err := range deploy.CheckPromQL(e, series) {
				errs = append(errs, fmt.Errorf("panel %q: %w", title, err))
			}
			sels, err := deploy.PromQLSelectors(e)
			require.NoError(t, err)
			for _, s := range sels {
				read[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s.Metric, "_bucket"), "_count"), "_sum")] = true
			}
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "variable %s: want label_values(metric, label), got %q", v.Name, v.Definition)
		labels, ok := series(m[1])
		require.True(t, ok, "variable %s reads %s, which hookd does not export", v.Name, m[1])
		require.Contains(t, labels, m[2], "variable %s", v.Name)
	}
	require.NoError(t, errors.Join(errs...))

	// The documented breaker and delivery series are all on the dashboard.
	for _, m := range []string{
		"webhook_delivery_total", "webhook_delivery_5xx_total", "webhook_delivery_duration_seconds",
		"breaker_open_total", "breaker_state", "breaker_trip_suppressed_total", "breaker_rejected_total",
		"endpoint_auto_disabled_total", "webhook_queue_depth", "webhook_oldest_pending_seconds",
		"breaker_open_duration_seconds", "breaker_class_open_duration_seconds", "breaker_fleet_suspect",
		"http_requests_total", "http_request_duration_seconds", "process_resident_memory_bytes", "go_goroutines",
	} {
		require.True(t, read[m], "no panel shows %s", m)
	}
}

// TestGrafanaDashboardPromQLParses hands every expression to Prometheus'
// own parser: promtool checks them as recording rules, Grafana's interval
// variables replaced by durations.
func TestGrafanaDashboardPromQLParses(t *testing.T) {
	t.Parallel()
	exprs := grafanaExprs(t, loadDashboard(t))
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for _, title := range slices.Sorted(maps.Keys(exprs)) {
		for _, e := range exprs[title] {
			rules = append(rules, rule{Record: fmt.Sprintf("grafana:panel_%d", len(rules)), Expr: vars.Replace(e)})
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "grafana", "rules": rules}}})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "grafana-rules.yml")
	require.NoError(t, os.WriteFile(file, b, 0o644))
	promtool(t, "check", "rules", file)
}
