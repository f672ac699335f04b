package deploy_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/retention"
	"github.com/hookd/hookd/internal/telemetry"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

// catalogues returns the api's and the dispatcher's metric families, from
// their real registries built with the constructors cmd/api and
// cmd/dispatcher call.
func catalogues(t *testing.T) []telemetrytest.Catalogue {
	t.Helper()
	api := telemetrytest.NewRecorder()
	telemetry.RegisterRuntime(api)
	telemetry.NewHTTPMetrics(api)
	dispatcher := telemetrytest.NewRecorder()
	telemetry.RegisterRuntime(dispatcher)
	dm := delivery.NewDispatcherMetrics(dispatcher, &delivery.EndpointLabels{})
	retention.NewMetrics(dispatcher, dm.Delivery.Expired)
	var cats []telemetrytest.Catalogue
	for _, r := range []*telemetrytest.Recorder{api, dispatcher} {
		c, err := r.Catalogue()
		require.NoError(t, err)
		cats = append(cats, c)
	}
	return cats
}

// exportedSeries returns, for a series name, the labels of the family the
// binaries export it in and whether there is one.
func exportedSeries(t *testing.T) func(name string) ([]string, bool) {
	t.Helper()
	cats := catalogues(t)
	return func(name string) ([]string, bool) {
		for _, c := range cats {
			if f, ok := c.Series(name); ok {
				return f.Labels, true
			}
		}
		return nil, false
	}
}

// TestObservabilityDocNamesEverySeries keeps docs/observability.md's tables
// complete: every family hookd itself exports is named there.
func TestObservabilityDocNamesEverySeries(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/observability.md")
	require.NoError(t, err)
	for _, c := range catalogues(t) {
		for _, name := range c.Names() {
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
				continue
			}
			require.Contains(t, string(doc), "`"+name+"`", "docs/observability.md does not describe %s", name)
		}
	}
}
