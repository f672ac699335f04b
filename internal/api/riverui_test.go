package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// withRiverUI mounts River's UI over the test database, stopped when the
// test ends.
func withRiverUI(t *testing.T) func(*api.Deps) {
	return func(d *api.Deps) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		rc, err := river.NewClient(riverpgxv5.New(d.Store.Pool()), &river.Config{})
		require.NoError(t, err)
		d.RiverUI, err = api.NewRiverUI(ctx, rc, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
	}
}

// TestRiverUIBehindTheDashboardLogin: with River's UI on, a request
// without a dashboard session is sent to the login (a page) or refused (its
// API), a bearer token is not a session, and a logged-in admin gets the
// UI's page and its job list.
func TestRiverUIBehindTheDashboardLogin(t *testing.T) {
	t.Parallel()
	srv, b := setup(t, withRiverUI(t))
	b.createEndpoint(t, "acme")
	b.sendMessage(t, "acme", "invoice.paid") // one deliver job
	br := newBrowser(t, srv.URL)

	page := br.send("GET", "/riverui", nil, nil)
	requireStatus(t, http.StatusSeeOther, page)
	require.Equal(t, "/dashboard/login?next=/riverui", page.Header.Get("Location"))
	requireStatus(t, http.StatusSeeOther, br.send("GET", "/riverui/jobs", nil, nil))
	requireProblem(t, http.StatusUnauthorized, br.send("GET", "/riverui/api/jobs?state=available", nil, nil))
	requireProblem(t, http.StatusUnauthorized, br.send("GET", "/riverui/api/jobs?state=available", nil, nil, "Authorization", "Bearer "+testToken))

	c, _ := br.loggedIn()
	page = br.send("GET", "/riverui", nil, c)
	requireStatus(t, http.StatusMovedPermanently, page)
	require.Equal(t, "/riverui/", page.Header.Get("Location"))
	page = br.send("GET", "/riverui/", nil, c)
	requireStatus(t, http.StatusOK, page)
	require.Contains(t, page.Header.Get("Content-Type"), "text/html")
	require.Contains(t, strings.ToLower(string(page.Body)), "river")

	jobs := br.send("GET", "/riverui/api/jobs?state=available", nil, c)
	requireStatus(t, http.StatusOK, jobs)
	var list struct {
		Data []struct {
			Kind  string `json:"kind"`
			State string `json:"state"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(jobs.Body, &list), "%s", jobs.Body)
	require.Len(t, list.Data, 1)
	require.Equal(t, "deliver", list.Data[0].Kind)

	// A change through the cookie must come from this origin.
	requireProblem(t, http.StatusForbidden, br.send("POST", "/riverui/api/jobs/cancel", strings.NewReader(`{"ids":["1"]}`), c,
		"Content-Type", "application/json", "Origin", "https://evil.example"))
}

// TestRiverUIOffAnswers404: without --riverui nothing is served there,
// logged in or not.
func TestRiverUIOffAnswers404(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	br := newBrowser(t, srv.URL)
	requireProblem(t, http.StatusNotFound, br.send("GET", "/riverui", nil, nil))
	c, _ := br.loggedIn()
	requireProblem(t, http.StatusNotFound, br.send("GET", "/riverui", nil, c))
	requireProblem(t, http.StatusNotFound, br.send("GET", "/riverui/api/jobs?state=available", nil, c))
}
