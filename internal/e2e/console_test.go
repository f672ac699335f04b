package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// deliveryRowSel is the CSS selector of a delivery's row on the Deliveries
// page, with extra attribute conditions.
func deliveryRowSel(id, cond string) string {
	return fmt.Sprintf(`#deliveries tr[data-delivery-id=%q]%s`, id, cond)
}

// TestConsoleInBrowser drives the Messages and Deliveries pages in
// headless Chromium against the real binaries: a receiver fails six
// deliveries and recovers; the operator finds a message by id, follows the
// endpoint's page to its failed deliveries, retries one from its row and
// two selected at once, recovers the other three (the confirmation says
// how many), and sees all six delivered; no page logs an error.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var failing atomic.Bool
	failing.Store(true)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if failing.Load() {
			return deliverytest.Response{Status: http.StatusServiceUnavailable, Body: []byte("maintenance")}
		}
		return deliverytest.Response{Status: http.StatusOK}
	}})
	api := StartAPI(t, db.URL, nil)
	ctx := context.Background()
	// A breaker that never opens here: the deliveries fail on the
	// retry schedule alone.
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", map[string]any{
		"name": "console", "trip": "rate", "failure_rate_threshold": 1, "window": "10s", "min_throughput": 1000,
	}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{"RETRY_SCHEDULE": "0s,50ms"})
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/hook"), "secret": testSecret, "traffic_class": "console"})
	var sent []Message
	for i := range 6 {
		sent = append(sent, api.SendMessage(t, "acme", "invoice.paid", map[string]any{"n": i}))
	}
	status := func(id string) string {
		var d Delivery
		_, err := api.Do(ctx, "GET", "/v1/deliveries/"+id, nil, &d)
		require.NoError(t, err)
		return d.Status
	}
	Eventually(t, time.Minute, 100*time.Millisecond, "six failed deliveries", func() bool {
		for _, m := range sent {
			if status(m.Deliveries[0].ID) != "failed" {
				return false
			}
		}
		return true
	})
	failing.Store(false)

	h := startHeadless(t)
	h.do("log in", 30*time.Second,
		chromedp.Navigate(api.URL+"/dashboard/messages"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), api.Token),
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.CSS(`#messages tbody tr`)),
	)
	require.Equal(t, "/dashboard/messages", eval[string](h, `location.pathname`))
	require.Equal(t, 6, eval[int](h, `document.querySelectorAll('#messages tbody tr').length`), "every message, newest first")
	require.Equal(t, sent[5].ID, eval[string](h, `document.querySelector('#messages tbody tr').dataset.messageId`))

	// A message by id: its payload and its delivery.
	target := sent[2]
	h.do("search a message by id", 15*time.Second,
		chromedp.SendKeys(chromedp.ID("m-id"), target.ID),
		chromedp.Click(chromedp.ID("m-search")),
		chromedp.WaitVisible(chromedp.CSS(`#m-detail`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#m-detail-list tr[data-delivery-id=%q][data-status="failed"]`, target.Deliveries[0].ID))),
	)
	require.Equal(t, target.ID, h.text("#m-detail-id"))
	require.Contains(t, h.text("#m-detail-payload"), `"n": 2`)
	require.Contains(t, eval[string](h, `location.search`), "id="+target.ID, "the search is in the query string")
	h.docScreenshot("messages-phone", 390, 844, true)

	// The endpoint's page links to its failed deliveries.
	h.do("the endpoint's failed deliveries", 30*time.Second,
		chromedp.Navigate(api.URL+"/dashboard/endpoints/"+ep.ID),
		chromedp.WaitVisible(chromedp.CSS(`#d-failed[href*="endpoint_id"]`)),
		chromedp.Click(chromedp.ID("d-failed")),
		chromedp.WaitVisible(chromedp.CSS(`#deliveries tbody tr`)),
		chromedp.WaitVisible(chromedp.CSS(`#recover`)),
	)
	require.Equal(t, "/dashboard/deliveries", eval[string](h, `location.pathname`))
	require.Equal(t, "true", eval[string](h, `document.querySelector('#status-filter button[data-status="failed"]').getAttribute('aria-pressed')`))
	require.Equal(t, 6, eval[int](h, `document.querySelectorAll('#deliveries tbody tr[data-status="failed"]').length`))
	h.docScreenshot("deliveries-desktop", 1280, 760, false)

	// Retry one from its row: it leaves the failed list and is delivered.
	one := sent[0].Deliveries[0].ID
	h.do("retry one", 30*time.Second,
		chromedp.Click(chromedp.CSS(deliveryRowSel(one, "")+` button[data-action="retry"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(deliveryRowSel(one, ""))),
	)
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the retried delivery delivered", func() bool { return status(one) == "delivered" })

	// Select two and retry them at once, confirming.
	two := []string{sent[1].Deliveries[0].ID, sent[2].Deliveries[0].ID}
	h.do("retry two selected", 30*time.Second,
		chromedp.Click(chromedp.CSS(deliveryRowSel(two[0], "")+` input.pick`)),
		chromedp.Click(chromedp.CSS(deliveryRowSel(two[1], "")+` input.pick`)),
		chromedp.WaitVisible(chromedp.CSS(`#retry-selected:not([disabled])`)),
		chromedp.Click(chromedp.ID("retry-selected")),
		chromedp.WaitNotPresent(chromedp.CSS(deliveryRowSel(two[0], ""))),
		chromedp.WaitNotPresent(chromedp.CSS(deliveryRowSel(two[1], ""))),
	)
	require.Len(t, h.dialogMessages(), 1)
	require.Contains(t, h.dialogMessages()[0], "Retry 2 failed deliveries?")
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the two delivered", func() bool {
		return status(two[0]) == "delivered" && status(two[1]) == "delivered"
	})

	// Recover the rest since an hour ago: the confirmation counts them.
	eval[chromedp.Void](h, `(() => {
		const d = new Date(Date.now() - 3600e3), p = (n) => String(n).padStart(2, '0');
		document.getElementById('recover-since').value =
			d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + 'T' + p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
	})()`)
	h.do("recover", 30*time.Second,
		chromedp.Click(chromedp.ID("recover-go")),
		chromedp.WaitNotPresent(chromedp.CSS(`#deliveries tbody tr[data-status="failed"]`)),
	)
	require.Len(t, h.dialogMessages(), 2)
	require.Contains(t, h.dialogMessages()[1], "Recover 3 failed deliveries of "+ep.ID+" since ")
	Eventually(t, time.Minute, 100*time.Millisecond, "every delivery delivered", func() bool {
		for _, m := range sent {
			if status(m.Deliveries[0].ID) != "delivered" {
				return false
			}
		}
		return true
	})
	require.Equal(t, 6, rc.Stats("/hook").DistinctDelivered)

	// The delivered filter shows all six, live.
	h.do("filter delivered", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#status-filter button[data-status="failed"]`)),
		chromedp.Click(chromedp.CSS(`#status-filter button[data-status="delivered"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#deliveries tbody tr[data-status="delivered"]`)),
	)
	require.Contains(t, eval[string](h, `location.search`), "status=delivered")
	Eventually(t, 10*time.Second, 100*time.Millisecond, "six delivered rows", func() bool {
		return eval[int](h, `document.querySelectorAll('#deliveries tbody tr[data-status="delivered"]').length`) == 6
	})
	h.requireNoErrors()
}
