package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/tuning"
)

// screenshotDir, when set, makes TestDashboardInBrowser save the
// dashboard's screenshots for docs/dashboard.md there:
//
//	go test ./internal/e2e -run TestDashboardInBrowser -dashboard-screenshots=$PWD/docs/img
var screenshotDir = flag.String("dashboard-screenshots", "", "save dashboard screenshots (light and dark, desktop and phone) in this directory")

// chromiumPath finds Debian's chromium (.ci/run installs it) or another
// Chrome named by CHROME_PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("e2e: no chromium found: install Debian's chromium (apt-get install -y chromium; .ci/run does) or set CHROME_PATH")
	return ""
}

// headless is a headless Chromium tab that records console errors,
// uncaught exceptions and error log entries, accepts every dialog, and
// saves a screenshot when the test fails.
type headless struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	errors  []string
	dialogs []string
}

func startHeadless(t *testing.T) *headless {
	t.Helper()
	// Flags for root in a container on a closed network: background
	// networking, component updates and sync would otherwise hang on it.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	h := &headless{t: t}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(h.listen))
	t.Cleanup(cancel)
	h.ctx = ctx
	// The first Do starts the browser and opens the tab; it must get ctx
	// itself, since the tab lives as long as the context of its first Do.
	require.NoError(t, chromedp.Do(ctx))
	_, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{})
	require.NoError(t, err)

	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			h.mu.Lock()
			h.dialogs = append(h.dialogs, ev.Message)
			h.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	t.Cleanup(func() {
		if t.Failed() {
			h.screenshot("failure")
		}
	})
	return h
}

// listen runs in the tab's message loop: it only records.
func (h *headless) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range ev.Args {
				if a.Value != nil {
					parts = append(parts, string(a.Value))
				} else {
					parts = append(parts, a.Description)
				}
			}
			msg = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "uncaught exception: " + d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		msg += fmt.Sprintf(" at %s:%d", d.URL, d.LineNumber)
	case *cdplog.EventEntryAdded:
		// Chromium aborts the requests in flight when the host's network
		// interfaces change (net::ERR_NETWORK_CHANGED), as the tests that
		// give dispatchers hosts of their own do beside this one when they
		// add and remove veth links; the pages poll, and ask again.
		if ev.Entry.Level == cdplog.EntryLevelError && !(ev.Entry.Source == cdplog.EntrySourceNetwork && strings.Contains(ev.Entry.Text, "ERR_NETWORK_CHANGED")) {
			msg = fmt.Sprintf("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		}
	}
	if msg != "" {
		h.mu.Lock()
		h.errors = append(h.errors, msg)
		h.mu.Unlock()
	}
}

// do runs actions with a timeout, failing the test on error.
func (h *headless) do(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, timeout)
	defer cancel()
	for {
		err := chromedp.Do(ctx, actions...)
		// The page re-renders its rows as data arrives: a node found by a
		// query can be replaced before the click reaches it. The actions
		// did nothing then; run them again on the new node.
		if err != nil && strings.Contains(err.Error(), "Could not find node with given id") && ctx.Err() == nil {
			continue
		}
		require.NoError(h.t, err, "browser: %s", what)
		return
	}
}

// clickUntil clicks sel until shown is visible, within timeout. The page
// re-renders its rows as data arrives, and a click can land on a node
// replaced just then: it is lost without an error, and nothing shows (on
// a loaded machine the endpoint page waited out its 30 s so). So each
// click is given a few seconds to show shown, and made again if it did
// not; once shown is visible, nothing more is clicked.
func (h *headless) clickUntil(what string, timeout time.Duration, sel, shown string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, timeout)
	defer cancel()
	try := func(d time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
		c, stop := context.WithTimeout(ctx, d)
		defer stop()
		return chromedp.Do(c, actions...)
	}
	for {
		if try(300*time.Millisecond, chromedp.WaitVisible(chromedp.CSS(shown))) == nil {
			return
		}
		err := try(5*time.Second, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.CSS(shown)))
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			require.NoError(h.t, err, "browser: %s", what)
		}
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](h *headless, expr string) T {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(h.t, err, "browser: evaluate %s", expr)
	return v
}

// text reads the visible text of the first element sel finds. The
// dashboard renders its rows again as its data refreshes, so a node
// found may be gone by the time its text is read ("No node with given id
// found"): it asks again, for 10 s at most.
func (h *headless) text(sel string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	for {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err == nil {
			return s
		}
		select {
		case <-ctx.Done():
			require.NoError(h.t, err, "browser: text of %s", sel)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// screenshot saves the page as name.png in the test's artifact directory
// (a temporary directory, kept under -outputdir when go test runs with
// -artifacts) and logs its path.
func (h *headless) screenshot(name string) {
	ctx, cancel := context.WithTimeout(h.ctx, 15*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		h.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(h.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		h.t.Logf("screenshot %s: %v", name, err)
		return
	}
	h.t.Logf("screenshot of the page: %s", p)
}

// docScreenshot saves a screenshot for the docs when -dashboard-screenshots
// is set, at a viewport width (phone widths emulate a mobile device) and
// colour scheme.
func (h *headless) docScreenshot(name string, width, height int64, dark bool) {
	h.t.Helper()
	if *screenshotDir == "" {
		return
	}
	scheme := "light"
	if dark {
		scheme = "dark"
	}
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	vopts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
	if width < 600 {
		vopts = []chromedp.EmulateViewportOption{chromedp.EmulateScale(2), chromedp.EmulateMobile}
	}
	require.NoError(h.t, chromedp.Do(ctx, chromedp.EmulateViewport(width, height, vopts...)))
	_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
	})
	require.NoError(h.t, err)
	time.Sleep(2500 * time.Millisecond) // a poll and a chart redraw at the new size
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(h.t, err)
	require.NoError(h.t, os.MkdirAll(*screenshotDir, 0o755))
	require.NoError(h.t, os.WriteFile(filepath.Join(*screenshotDir, name+"-"+scheme+".png"), buf, 0o644))
	require.NoError(h.t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)))
	_, err = chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{})
	require.NoError(h.t, err)
}

func (h *headless) requireNoErrors() {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(h.t, h.errors, "the pages logged errors")
}

func (h *headless) dialogMessages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.dialogs...)
}

// row is the CSS selector of an endpoint's row in the breaker list, with
// extra attribute conditions.
func row(id, cond string) string {
	return fmt.Sprintf(`tr[data-endpoint-id=%q]%s`, id, cond)
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// the real binaries: log in, watch a breaker open while its receiver
// fails, reset it from the page (accepting the confirmation) and see it
// close; enable an endpoint disabled through the API; look at the
// endpoint's page with its chart; and no page logs an error.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var failing atomic.Bool
	failing.Store(true)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if r.Path == "/sick" && failing.Load() {
			return deliverytest.Response{Status: http.StatusInternalServerError, Body: []byte(`{"error":"database is down"}`)}
		}
		return deliverytest.Response{Status: http.StatusOK, Delay: 5 * time.Millisecond}
	}})
	env := map[string]string{"ALLOW_PRIVATE_TARGETS": "true"}
	api := StartAPI(t, db.URL, env)
	ctx := context.Background()
	// Opens fast and stays open long enough to be seen and reset.
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", map[string]any{
		"name": "dashfast", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 20,
		"open_duration": "30s", "half_open_trials": 1, "half_open_concurrency": 1,
	}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{
		"ALLOW_PRIVATE_TARGETS": "true", "WORKERS": "20",
		"RETRY_SCHEDULE": "0s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s",
	})
	endpoint := func(path, class string) Endpoint {
		return api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL(path), "secret": testSecret, "traffic_class": class})
	}
	sick := endpoint("/sick", "dashfast")
	held := endpoint("/held", "dashfast")
	healthy := endpoint("/ok", "dashfast")
	isolated := endpoint("/isolated", "medium")
	code, err = api.Do(ctx, "POST", "/v1/endpoints/"+held.ID+"/disable", nil, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	code, err = api.Do(ctx, "POST", "/v1/endpoints/"+isolated.ID+"/breaker/isolate", map[string]any{"reason": "customer maintenance"}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)

	// A destination other than HTTP, of a tenant no message goes to: its
	// row names its type and destination (it has no URL).
	broker := api.CreateEndpoint(t, map[string]any{"tenant_id": "globex", "type": "rabbitmq",
		"destination": map[string]any{"url": "amqp://127.0.0.1:5672/", "exchange": "webhooks", "routing_key": "orders"}})

	h := startHeadless(t)

	// Log in: /dashboard sends the browser to the login form.
	h.do("log in", 30*time.Second,
		chromedp.Navigate(api.URL+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), api.Token),
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.CSS("#breakers")),
		chromedp.WaitVisible(chromedp.CSS(row(sick.ID, `[data-state="closed"]`))),
	)
	require.Equal(t, "/dashboard", eval[string](h, `location.pathname`))
	h.do("the disabled endpoint and the isolated one", 10*time.Second,
		chromedp.WaitVisible(chromedp.CSS(row(held.ID, `[data-endpoint-status="disabled"]`))),
		chromedp.WaitVisible(chromedp.CSS(row(isolated.ID, `[data-state="isolated"]`))),
	)
	require.Contains(t, h.text(row(held.ID, "")+" td.state"), "reason: manual")
	require.Contains(t, h.text(row(isolated.ID, "")+" .countdown"), "held until reset")
	h.do("the destination endpoint", 10*time.Second, chromedp.WaitVisible(chromedp.CSS(row(broker.ID, ""))))
	require.Equal(t, "rabbitmq: amqp://127.0.0.1:5672/ webhooks", h.text(row(broker.ID, "")+" a.url"))

	// The receiver fails: the breaker opens and the page shows it.
	for i := range 60 {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	h.do("the breaker opens", 90*time.Second, chromedp.WaitVisible(chromedp.CSS(row(sick.ID, `[data-state="open"]`))))
	require.Regexp(t, regexp.MustCompile(`^in \d+s$`), h.text(row(sick.ID, "")+" .countdown"), "the time until the next probe")
	require.Contains(t, h.text(row(sick.ID, "")+" td.rate"), "/ 50%")
	require.Contains(t, h.text(row(sick.ID, "")+" td.obs"), "/ 20")
	// An open breaker's row shows the window that tripped it, not its own
	// window, which the open emptied.
	require.Contains(t, h.text(row(sick.ID, "")+" td.rate"), "at trip")
	require.Regexp(t, regexp.MustCompile(`^([5-9]\d|100)%`), h.text(row(sick.ID, "")+" td.rate"), "at least the threshold tripped it")
	require.Regexp(t, regexp.MustCompile(`^([2-9]\d|\d{3,})/ 20 at trip`), h.text(row(sick.ID, "")+" td.obs"), "at least min_throughput observations")
	require.Equal(t, "1", h.text(row(sick.ID, "")+" td.trips"))

	// Filters and search narrow the list.
	visible := func(id string) bool {
		return eval[bool](h, fmt.Sprintf(`!document.querySelector(%q).hidden`, row(id, "")))
	}
	h.do("filter open", 5*time.Second, chromedp.Click(chromedp.CSS(`#state-filter button[data-filter="open"]`)))
	require.True(t, visible(sick.ID))
	require.False(t, visible(healthy.ID))
	require.False(t, visible(held.ID))
	h.do("filter disabled", 5*time.Second, chromedp.Click(chromedp.CSS(`#state-filter button[data-filter="disabled"]`)))
	require.True(t, visible(held.ID))
	require.False(t, visible(sick.ID))
	h.do("filter all", 5*time.Second, chromedp.Click(chromedp.CSS(`#state-filter button[data-filter="all"]`)))
	h.do("search", 5*time.Second, chromedp.SendKeys(chromedp.ID("search"), "/isol"))
	require.True(t, visible(isolated.ID))
	require.False(t, visible(sick.ID))
	require.False(t, visible(broker.ID))
	eval[chromedp.Void](h, `(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); })()`)
	h.do("search a destination", 5*time.Second, chromedp.SendKeys(chromedp.ID("search"), "rabbitmq"))
	require.True(t, visible(broker.ID))
	require.False(t, visible(isolated.ID))
	eval[chromedp.Void](h, `(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); })()`)
	require.True(t, visible(sick.ID))

	h.docScreenshot("breakers-desktop", 1280, 640, false)
	h.docScreenshot("breakers-phone", 390, 844, true)

	// The receiver recovers; reset from the page, confirming.
	failing.Store(false)
	h.do("reset", 30*time.Second,
		chromedp.Click(chromedp.CSS(row(sick.ID, "")+` button[data-action="reset"]`)),
		chromedp.WaitVisible(chromedp.CSS(row(sick.ID, `[data-state="closed"]`))),
	)
	require.Len(t, h.dialogMessages(), 1)
	require.Contains(t, h.dialogMessages()[0], "Reset the breaker of "+rc.URL("/sick"))
	var detail struct {
		Transitions []struct {
			Reason string `json:"reason"`
			Actor  string `json:"actor"`
			Note   string `json:"note"`
		} `json:"transitions"`
	}
	_, err = api.Do(ctx, "GET", "/v1/endpoints/"+sick.ID+"/breaker", nil, &detail)
	require.NoError(t, err)
	require.NotEmpty(t, detail.Transitions)
	last := detail.Transitions[0]
	require.Equal(t, "reset", last.Reason, "the page's reset closed it, not the clock: open lasts 30 s")
	require.Equal(t, "bootstrap", last.Actor, "the session's token name")
	require.Equal(t, "reset from the dashboard", last.Note)

	// Enable the disabled endpoint from the page.
	h.do("enable", 30*time.Second,
		chromedp.Click(chromedp.CSS(row(held.ID, "")+` button[data-action="enable"]`)),
		chromedp.WaitVisible(chromedp.CSS(row(held.ID, `[data-endpoint-status="enabled"]`))),
	)
	require.Len(t, h.dialogMessages(), 2)
	require.Contains(t, h.dialogMessages()[1], "Enable "+rc.URL("/held"))
	var e Endpoint
	_, err = api.Do(ctx, "GET", "/v1/endpoints/"+held.ID, nil, &e)
	require.NoError(t, err)
	require.Equal(t, "enabled", e.Status)
	Eventually(t, time.Minute, 100*time.Millisecond, "the held deliveries released and delivered", func() bool {
		return rc.Stats("/held").DistinctDelivered == 60
	})

	// The endpoint's page: its attempts and the chart with the open and
	// the reset marked.
	h.clickUntil("endpoint page", 30*time.Second, row(sick.ID, "")+` a.url`, `#detail-view`)
	h.do("endpoint page's chart and attempts", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#chart svg`)),
		chromedp.WaitVisible(chromedp.CSS(`#attempts tbody tr`)),
	)
	require.Equal(t, "/dashboard/endpoints/"+sick.ID, eval[string](h, `location.pathname`))
	require.Equal(t, rc.URL("/sick"), h.text("#d-url"))
	marks := eval[[]string](h, `[...document.querySelectorAll('#chart .mark')].map((m) => m.dataset.to)`)
	require.Contains(t, marks, "open")
	require.Contains(t, marks, "closed")
	require.Positive(t, eval[int](h, `document.querySelectorAll('#chart rect.o-failure').length`), "failures drawn")
	// The deliveries refused while open wait out open_until, then succeed.
	Eventually(t, 90*time.Second, 500*time.Millisecond, "successes drawn", func() bool {
		return eval[int](h, `document.querySelectorAll('#chart rect.o-success').length`) > 0
	})
	require.Contains(t, h.text("#transitions tbody"), "reset from the dashboard")
	h.docScreenshot("endpoint-desktop", 1280, 1000, true)
	h.docScreenshot("endpoint-phone", 390, 844, false)

	// The classes page: a class's proposal beside its config, figures side
	// by side; apply it from the page.
	proposeForDashboard(t, db, "dashfast")
	h.do("classes page", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#tabs a[data-tab="classes"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#classes .card[data-class="dashfast"][data-status="proposed"]`)),
	)
	card := `#classes .card[data-class="dashfast"]`
	require.Equal(t, "0.5", h.text(card+` tr[data-field="failure_rate_threshold"] td.cur`))
	require.Equal(t, "0.7", h.text(card+` tr[data-field="failure_rate_threshold"] td.prop`))
	require.Equal(t, "12", h.text(card+` tr[data-figure="opens_quiet"] td.cur`))
	require.Equal(t, "0", h.text(card+` tr[data-figure="opens_quiet"] td.prop`))
	// A class with nothing proposed (no pass yet, or a pass that kept its
	// config for too little evidence) offers nothing to apply.
	require.Contains(t, []string{"none", "kept"}, eval[string](h, `document.querySelector('#classes .card[data-class="medium"]').dataset.status`))
	require.False(t, eval[bool](h, `!!document.querySelector('#classes .card[data-class="medium"] button[data-action="apply"]')`))
	h.docScreenshot("classes-desktop", 1280, 900, false)
	h.do("apply", 30*time.Second,
		chromedp.Click(chromedp.CSS(card+` button[data-action="apply"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#classes .card[data-class="dashfast"][data-status="applied"]`)),
	)
	require.Contains(t, h.dialogMessages()[len(h.dialogMessages())-1], "Apply the proposed config to class dashfast")
	var class map[string]any
	_, err = api.Do(ctx, "GET", "/v1/traffic-classes/dashfast", nil, &class)
	require.NoError(t, err)
	require.Equal(t, 0.7, class["failure_rate_threshold"])

	h.requireNoErrors()

	// The capture is not vacuous: a console error and an uncaught exception
	// of the page are both seen.
	eval[chromedp.Void](h, `console.error('probe: console'); setTimeout(() => { throw new Error('probe: exception'); })`)
	Eventually(t, 10*time.Second, 50*time.Millisecond, "the probes recorded", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		all := strings.Join(h.errors, "\n")
		return strings.Contains(all, "probe: console") && strings.Contains(all, "probe: exception")
	})
}

// proposeForDashboard stores a proposal for class as a tuning pass would:
// its config with the threshold raised to 0.7, which the replay found
// opened 12 times on quiet traffic against none.
func proposeForDashboard(t *testing.T, db *storetest.DB, class string) {
	t.Helper()
	ctx := context.Background()
	st := store.New(db.Pool, nil)
	c, err := st.GetClass(ctx, class)
	require.NoError(t, err)
	cur, prop := tuning.ClassConfig(c.Breaker), tuning.ClassConfig(c.Breaker)
	prop.FailureRateThreshold = 0.7
	two := 2.5
	rec := tuning.Recommendation{Class: class, Status: tuning.StatusProposed, Current: &cur, Proposed: &prop,
		Figures: tuning.FiguresPair{
			Current:  &tuning.Figures{OpensQuiet: 12, BlockedHealthy: 340, IncidentsDetected: 1, Incidents: 1, DetectSMedian: &two, DetectSMax: &two, Wasted: 30, Sent: 30},
			Proposed: &tuning.Figures{OpensQuiet: 0, IncidentsDetected: 1, Incidents: 1, DetectSMedian: &two, DetectSMax: &two, Wasted: 31, Sent: 31},
		},
		Reasons: []string{"proposed by the test"}}
	body, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, st.SaveRecommendation(ctx, store.Recommendation{Class: class, Status: "proposed", Body: body}, "", nil))
}
