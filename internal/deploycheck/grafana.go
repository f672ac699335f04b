package deploycheck

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Panel is the part of a Grafana panel the checks read.
type Panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Dashboard is the part of a Grafana dashboard the checks read.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// LoadDashboard reads a dashboard JSON file.
func LoadDashboard(file string) (*Dashboard, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read dashboard: %w", err)
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &d, nil
}

// grafanaVars are Grafana's interval variables, replaced by durations so
// that an expression parses as PromQL; a $var inside a label value is a
// string to PromQL already.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h")

// Exprs returns every panel's PromQL expressions, Grafana's interval
// variables replaced, by panel title.
func (d *Dashboard) Exprs() map[string][]string {
	out := map[string][]string{}
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				out[p.Title] = append(out[p.Title], grafanaVars.Replace(t.Expr))
			}
		}
	}
	walk(d.Panels)
	return out
}
