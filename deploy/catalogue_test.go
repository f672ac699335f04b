package deploy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/telemetry"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

// exportedSeries returns what the two binaries export, from their real
// registries built with the constructors cmd/api and cmd/dispatcher call:
// for a series name, the labels of its family and whether it exists.
func exportedSeries(t *testing.T) func(name string) ([]string, bool) {
	t.Helper()
	api := telemetrytest.NewRecorder()
	telemetry.RegisterRuntime(api)
	telemetry.NewHTTPMetrics(api)
	dispatcher := telemetrytest.NewRecorder()
	telemetry.RegisterRuntime(dispatcher)
	delivery.NewDispatcherMetrics(dispatcher, &delivery.EndpointLabels{})
	var cats []telemetrytest.Catalogue
	for _, r := range []*telemetrytest.Recorder{api, dispatcher} {
		c, err := r.Catalogue()
		require.NoError(t, err)
		cats = append(cats, c)
	}
	return func(name string) ([]string, bool) {
		for _, c := range cats {
			if f, ok := c.Series(name); ok {
				return f.Labels, true
			}
		}
		return nil, false
	}
}
