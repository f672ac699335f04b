package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScrapeSumsEverySeries: a metric's series are summed across their
// labels, of counters, gauges and untyped metrics alike; a name not on
// the page is left out.
func TestScrapeSumsEverySeries(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# HELP webhook_delivery_total Deliveries {by outcome}.
# TYPE webhook_delivery_total counter
webhook_delivery_total{outcome="success",class="a b"} 10
webhook_delivery_total{outcome="failure",class="}"} 2.5
# TYPE go_goroutines gauge
go_goroutines 42
other_untyped 7
`))
	}))
	t.Cleanup(srv.Close)
	got, err := scrape(context.Background(), srv.URL, []string{"webhook_delivery_total", "go_goroutines", "other_untyped", "absent"})
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"webhook_delivery_total": 12.5, "go_goroutines": 42, "other_untyped": 7}, got)
}

// TestScrapeOfAPageCutShortIsAnError: a page that ends mid-line (the
// scrape's context ended, or the process stopped, while its body was
// read) is an error, not a panic nor a partial sum. The soak's scrape at
// the end of its run panicked on such a line.
func TestScrapeOfAPageCutShortIsAnError(t *testing.T) {
	t.Parallel()
	for _, page := range []string{
		"# TYPE webhook_delivery_total counter\nwebhook_delivery_total{outcome=\"succ",
		"# TYPE webhook_delivery_total counter\nwebhook_delivery_total{outcome=\"success\"}",
		"webhook_delivery_total{",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(page))
		}))
		_, err := scrape(context.Background(), srv.URL, []string{"webhook_delivery_total"})
		srv.Close()
		require.Error(t, err, "page %q", page)
	}
}

// TestScrapeOfAFailedPageIsAnError: a status other than 200 is an error.
func TestScrapeOfAFailedPageIsAnError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	_, err := scrape(context.Background(), srv.URL, []string{"go_goroutines"})
	require.Error(t, err)
}
