package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

func portalCard(id string) string { return fmt.Sprintf(`li.card[data-endpoint=%q]`, id) }

// openPortal opens a portal session for tenant and returns its URL.
func openPortal(t *testing.T, api *API, tenant string, body map[string]any) string {
	t.Helper()
	var out struct {
		URL string `json:"url"`
	}
	code, err := api.Do(context.Background(), "POST", "/v1/tenants/"+tenant+"/portal-sessions", body, &out)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	return out.URL
}

// TestPortalInBrowser drives the tenant portal in headless Chromium against
// the real binaries: the session URL logs in once (and drops its code from
// the address), a second visit is refused; the tenant adds an endpoint,
// sends it a test event and sees it delivered; another endpoint's breaker
// opens while its receiver fails and the page says so in words; a third
// endpoint's deliveries fail while its receiver is down, and once it is back
// the portal's recovery action (its count confirmed first) delivers each of
// them exactly once; nothing of another tenant shows; a read-only session shows no action and the API
// refuses one all the same.
func TestPortalInBrowser(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var failing atomic.Bool
	failing.Store(true)
	var outageDown atomic.Bool
	outageDown.Store(true)
	// No signature check: the endpoint the portal adds has a secret hookd
	// generated.
	rc := deliverytest.Start(t, deliverytest.Options{Respond: func(r *deliverytest.Request) deliverytest.Response {
		if (r.Path == "/sick" && failing.Load()) || (r.Path == "/outage" && outageDown.Load()) {
			return deliverytest.Response{Status: http.StatusInternalServerError, Body: []byte(`{"error":"database is down"}`)}
		}
		return deliverytest.Response{Status: http.StatusOK, Body: []byte(`{"received":true}`)}
	}})
	api := StartAPI(t, db.URL, nil)
	ctx := context.Background()
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", map[string]any{
		"name": "portalfast", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 20,
		"open_duration": "60s", "half_open_trials": 1, "half_open_concurrency": 1,
	}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	// A shadow class observes without parking: the outage endpoint's
	// deliveries use up the retry schedule and fail.
	code, err = api.Do(ctx, "POST", "/v1/traffic-classes", map[string]any{
		"name": "portalshadow", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 20,
		"open_duration": "2s", "half_open_trials": 1, "half_open_concurrency": 1, "enforce": false,
	}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{"WORKERS": "20", "RETRY_SCHEDULE": "0s,1s,1s,1s,1s,1s,1s,1s,1s,1s"})
	sick := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/sick"), "secret": testSecret, "traffic_class": "portalfast", "event_types": []string{"order.created"}})
	other := api.CreateEndpoint(t, map[string]any{"tenant_id": "globex", "url": rc.URL("/globex-secret-path"), "secret": testSecret})

	url := openPortal(t, api, "acme", map[string]any{"theme": map[string]any{"brand_color": "#0b6e4f", "name": "Acme Webhooks"}})
	h := startHeadless(t)
	h.do("log in with the session URL", 30*time.Second,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(portalCard(sick.ID))),
	)
	require.Equal(t, "", eval[string](h, `location.hash`), "the code left the address")
	require.Equal(t, "Acme Webhooks", h.text("#title"))
	require.Equal(t, "#0b6e4f", eval[string](h, `getComputedStyle(document.documentElement).getPropertyValue("--brand").trim()`))
	html := eval[string](h, `document.documentElement.outerHTML`)
	require.NotContains(t, html, other.ID)
	require.NotContains(t, html, "globex")

	// The tenant adds an endpoint and sends it a test event.
	okURL := rc.URL("/ok")
	h.do("add an endpoint", 20*time.Second,
		chromedp.SendKeys(chromedp.ID("new-url"), okURL),
		chromedp.Click(chromedp.CSS(`#create-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#endpoints li.card:nth-child(2)`)),
	)
	newID := eval[string](h, `[...document.querySelectorAll("li.card")].find(li => li.querySelector("h3").textContent === `+jsString(okURL)+`).dataset.endpoint`)
	require.True(t, strings.HasPrefix(newID, "ep_"), newID)
	h.do("send a test event", 10*time.Second, chromedp.Click(chromedp.CSS(portalCard(newID)+` button[data-action="test"]`)))
	Eventually(t, 10*time.Second, 50*time.Millisecond, "the page says the event was sent", func() bool {
		s := h.text("#status")
		require.NotContains(t, s, "Failed")
		return s == "Test event sent"
	})
	Eventually(t, time.Minute, 100*time.Millisecond, "the test event delivered", func() bool { return rc.Stats("/ok").Delivered >= 1 })
	// The page lists the attempts the log holds when asked: wait for the
	// dispatcher's ledger to have written this one (it batches its writes,
	// later than the receipt on a loaded machine).
	Eventually(t, time.Minute, 100*time.Millisecond, "the attempt logged", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM delivery_attempts WHERE endpoint_id = $1 AND status_code = 200`, newID).Scan(&n))
		return n >= 1
	})
	h.do("see it delivered", 30*time.Second,
		chromedp.Click(chromedp.CSS(portalCard(newID)+` button[data-action="attempts"]`)),
		chromedp.WaitVisible(chromedp.CSS(portalCard(newID)+` td.excerpt`)),
	)
	require.Contains(t, h.text(portalCard(newID)+" .attempts"), "200")
	require.Contains(t, h.text(portalCard(newID)+" .attempts"), `{"received":true}`)

	// The outage receiver is down: its deliveries fail while the sick
	// endpoint's breaker opens.
	const outageMessages = 10
	outage := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/outage"), "secret": testSecret, "traffic_class": "portalshadow", "event_types": []string{"order.outage"}})
	outageIDs := map[string]int{}
	for i := range outageMessages {
		outageIDs[api.SendMessage(t, "acme", "order.outage", map[string]any{"n": i}).ID] = 1
	}

	// The sick receiver fails: its breaker opens and the page says so.
	for i := range 60 {
		api.SendMessage(t, "acme", "order.created", map[string]any{"n": i})
	}
	Eventually(t, 90*time.Second, 200*time.Millisecond, "the page says the endpoint is paused", func() bool {
		return strings.HasPrefix(eval[string](h, `(document.querySelector(`+jsString(portalCard(sick.ID)+" .health")+`) || {}).textContent || ""`), "Paused:")
	})
	require.Regexp(t, regexp.MustCompile(`^Paused: \d+% of deliveries failed in the last 2s; next try in \d+ s$`), h.text(portalCard(sick.ID)+" .health"))
	require.NotContains(t, h.text(portalCard(sick.ID)+" .health"), "Paused: 0%", "the rate that tripped it")
	eval[int](h, `window.scrollTo(0, 0), 0`)
	h.docScreenshot("portal-desktop", 1280, 800, false)
	h.docScreenshot("portal-phone", 390, 844, true)
	h.docScreenshot("portal-desktop", 1280, 800, true)
	h.docScreenshot("portal-phone", 390, 844, false)

	// Once the outage endpoint's deliveries have failed and its receiver is
	// back, the portal recovers them: the default time (24 h ago) covers
	// them all, the confirmation counts them, each arrives once.
	Eventually(t, 60*time.Second, 200*time.Millisecond, "every outage delivery failed", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'failed'`, outage.ID).Scan(&n))
		return n == outageMessages
	})
	require.Zero(t, rc.Stats("/outage").Delivered)
	outageDown.Store(false)
	h.do("count the failed deliveries", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(portalCard(outage.ID)+` button[data-action="recover"]`)),
		chromedp.Click(chromedp.CSS(portalCard(outage.ID)+` button[data-action="recover"]`)),
		chromedp.WaitVisible(chromedp.CSS(portalCard(outage.ID)+` button[data-action="recover-confirm"]`)),
	)
	require.Contains(t, h.text(portalCard(outage.ID)+" [data-confirm]"), "10 failed deliveries since")
	require.Equal(t, "Recover failed deliveries since", h.text(`label[for="recover-since-`+outage.ID+`"]`))
	h.do("recover them", 10*time.Second, chromedp.Click(chromedp.CSS(portalCard(outage.ID)+` button[data-action="recover-confirm"]`)))
	Eventually(t, 10*time.Second, 50*time.Millisecond, "the page says they were queued", func() bool {
		s := h.text("#status")
		require.NotContains(t, s, "Failed")
		return s == "Queued 10 deliveries; they are sent at a pace the endpoint takes"
	})
	Eventually(t, 30*time.Second, 100*time.Millisecond, "every recovered delivery arrived", func() bool {
		return len(rc.DeliveredIDs("/outage")) == outageMessages
	})
	require.Equal(t, outageIDs, rc.DeliveredIDs("/outage"), "each outage webhook-id exactly once")

	// The URL logs in once: a second visit is refused.
	h.do("visit the URL again", 20*time.Second,
		chromedp.Navigate("about:blank"),
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("status")),
	)
	Eventually(t, 10*time.Second, 100*time.Millisecond, "the reused link is refused", func() bool {
		return strings.Contains(h.text("#status"), "used already")
	})
	h.requireNoErrorsBut("401")

	// A read-only session shows no action, and the API refuses one.
	ro := startHeadless(t)
	ro.do("log in read-only", 30*time.Second,
		chromedp.Navigate(openPortal(t, api, "acme", map[string]any{"read_only": true})),
		chromedp.WaitVisible(chromedp.CSS(portalCard(newID))),
	)
	require.True(t, eval[bool](ro, `document.getElementById("create").hidden`))
	require.Equal(t, 0, eval[int](ro, `document.querySelectorAll("button[data-action]:not([data-action=attempts])").length`))
	eval[int](ro, `fetch("/v1/endpoints/`+newID+`/disable", {method: "POST", headers: {"X-CSRF-Token": state.csrf}}).then(r => { window.refused = r.status }), 0`)
	Eventually(t, 10*time.Second, 50*time.Millisecond, "the API answers", func() bool { return eval[int](ro, `window.refused || 0`) != 0 })
	require.Equal(t, http.StatusForbidden, eval[int](ro, `window.refused`))
	var ep Endpoint
	_, err = api.Do(ctx, "GET", "/v1/endpoints/"+newID, nil, &ep)
	require.NoError(t, err)
	require.Equal(t, "enabled", ep.Status)
}

func jsString(s string) string { return fmt.Sprintf("%q", s) }

// requireNoErrorsBut fails on any error the pages logged other than those
// containing expected (a refusal the test provoked).
func (h *headless) requireNoErrorsBut(expected string) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var others []string
	for _, e := range h.errors {
		if !strings.Contains(e, expected) {
			others = append(others, e)
		}
	}
	require.Empty(h.t, others, "the pages logged errors")
}

// TestPortalSaysARecoveryIsStillReleasing: with no dispatcher running, a
// recovery's deliveries stay parked, so the recovery is still releasing
// when the tenant asks for another one: the portal queues the first
// recovery, and answers the second (the API's 409) in words, queuing
// nothing more.
func TestPortalSaysARecoveryIsStillReleasing(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := StartAPI(t, db.URL, nil)
	ctx := context.Background()
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook", "secret": testSecret})
	st := store.New(db.Pool, nil)
	fail := func() {
		t.Helper()
		m := api.SendMessage(t, "acme", "order.created", map[string]any{"n": 1})
		require.Len(t, m.Deliveries, 1)
		now, code, msg := time.Now(), 503, "HTTP 503"
		// The worker's last word on an exhausted retry schedule.
		require.NoError(t, st.RecordLedger(ctx, nil, []store.StatusUpdate{{DeliveryID: m.Deliveries[0].ID, Series: 1, Status: store.DeliveryFailed,
			AttemptCount: 8, LastAttemptAt: &now, LastStatusCode: &code, LastError: &msg}}))
	}
	fail()
	fail()

	h := startHeadless(t)
	card := portalCard(ep.ID)
	recoverAll := func(what string, n string) {
		t.Helper()
		h.do(what, 30*time.Second,
			chromedp.WaitVisible(chromedp.CSS(card+` button[data-action="recover"]`)),
			chromedp.Click(chromedp.CSS(card+` button[data-action="recover"]`)),
			chromedp.WaitVisible(chromedp.CSS(card+` button[data-action="recover-confirm"]`)),
		)
		require.Contains(t, h.text(card+" [data-confirm]"), n+" since")
		h.do("confirm: "+what, 10*time.Second, chromedp.Click(chromedp.CSS(card+` button[data-action="recover-confirm"]`)))
	}
	h.do("log in", 30*time.Second,
		chromedp.Navigate(openPortal(t, api, "acme", map[string]any{})),
		chromedp.WaitVisible(chromedp.CSS(card)),
	)
	recoverAll("recover the failed deliveries", "2 failed deliveries")
	Eventually(t, 10*time.Second, 50*time.Millisecond, "the page says they were queued", func() bool {
		return h.text("#status") == "Queued 2 deliveries; they are sent at a pace the endpoint takes"
	})

	fail()
	recoverAll("recover again while the first is releasing", "1 failed delivery")
	Eventually(t, 10*time.Second, 50*time.Millisecond, "the page says why it was refused", func() bool {
		return h.text("#status") == "A recovery of this endpoint is still releasing its deliveries: try again once it has released them all"
	})
	var waiting, failed int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'waiting'), count(*) FILTER (WHERE status = 'failed')
		FROM deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&waiting, &failed))
	require.Equal(t, []int{2, 1}, []int{waiting, failed}, "the refused recovery queued nothing")
	h.requireNoErrorsBut("409")
}
