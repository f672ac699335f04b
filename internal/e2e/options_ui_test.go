package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestDeliveryOptionsInPortalAndDashboard drives both pages in headless
// Chromium: a FIFO endpoint with a filter, its own retry schedule and
// timeout, whose queue stops at a delivery that used up its retries; the
// tenant's portal shows the options and the stop, the operator's
// dashboard shows them too and skips the stopped delivery, after which the
// queue delivers the rest in order; and the portal's form adds an ordered
// endpoint.
func TestDeliveryOptionsInPortalAndDashboard(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var down atomic.Bool
	down.Store(true)
	o := newOrderedReceiver(0, 1)
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: func(r *deliverytest.Request) deliverytest.Response {
		if down.Load() {
			return deliverytest.Response{Status: http.StatusInternalServerError}
		}
		return o.respond(r)
	}})
	api := StartAPI(t, db.URL, nil)
	StartDispatcher(t, "dispatcher", db.URL, map[string]string{"BREAKERS": "false"})
	ep := api.CreateEndpoint(t, map[string]any{"tenant_id": "acme", "url": rc.URL("/fifo"), "secret": testSecret,
		"ordering": "fifo", "on_exhausted": "block", "filter": map[string]any{"$event_type": "order.created"},
		"retry_schedule": []string{"0s", "100ms"}, "timeout": "2s"})
	ctx := context.Background()
	var ids []string
	for i := range 3 {
		ids = append(ids, api.SendMessage(t, "acme", "order.created", map[string]any{"n": i}).ID)
	}
	filtered := api.SendMessage(t, "acme", "order.ignored", map[string]any{"n": 9})
	require.Empty(t, filtered.Deliveries, "the filter leaves the endpoint out")
	var blocked string
	Eventually(t, 30*time.Second, 50*time.Millisecond, "the queue stopped at its head", func() bool {
		var e struct {
			BlockedBy *string `json:"blocked_by"`
		}
		_, err := api.Do(ctx, "GET", "/v1/endpoints/"+ep.ID, nil, &e)
		require.NoError(t, err)
		if e.BlockedBy != nil {
			blocked = *e.BlockedBy
		}
		return blocked != ""
	})

	h := startHeadless(t)
	h.do("open the portal", 30*time.Second,
		chromedp.Navigate(openPortal(t, api, "acme", map[string]any{})),
		chromedp.WaitVisible(chromedp.CSS(portalCard(ep.ID)+` [data-blocked=`+jsString(blocked)+`]`)),
	)
	opts := h.text(portalCard(ep.ID) + " [data-options]")
	for _, want := range []string{"In order, one at a time", "stops at a delivery that uses up its retries", `Only messages matching {"$event_type":"order.created"}`,
		"2 attempts, retried after 100ms", "Timeout 2s"} {
		require.Contains(t, opts, want)
	}
	require.Contains(t, h.text(portalCard(ep.ID)+" [data-blocked]"), "used up its retries")

	// The tenant adds an ordered endpoint from the form.
	orderedURL := rc.URL("/ordered")
	h.do("add an ordered endpoint", 20*time.Second,
		chromedp.SendKeys(chromedp.ID("new-url"), orderedURL),
		chromedp.Click(chromedp.ID("new-ordered")),
		chromedp.Click(chromedp.CSS(`#create-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#endpoints li.card:nth-child(2)`)),
	)
	var list struct {
		Data []struct {
			URL      string `json:"url"`
			Ordering string `json:"ordering"`
		} `json:"data"`
	}
	_, err := api.Do(ctx, "GET", "/v1/endpoints?tenant_id=acme", nil, &list)
	require.NoError(t, err)
	var found bool
	for _, e := range list.Data {
		if e.URL == orderedURL {
			found = true
			require.Equal(t, "fifo", e.Ordering)
		}
	}
	require.True(t, found)

	// The operator's dashboard shows the options and skips the stopped
	// delivery; the rest go, in order.
	down.Store(false)
	h.do("log in to the dashboard and open the endpoint", 30*time.Second,
		chromedp.Navigate(api.URL+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), api.Token),
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.CSS("#breakers")),
		chromedp.Navigate(api.URL+"/dashboard/endpoints/"+ep.ID),
		chromedp.WaitVisible(chromedp.CSS(`#d-options [data-blocked=`+jsString(blocked)+`]`)),
	)
	figures := h.text("#d-options")
	for _, want := range []string{"FIFO", "the queue stops", `{"$event_type":"order.created"}`, "0s, 100ms", "2s"} {
		require.Contains(t, figures, want)
	}
	h.do("skip the stopped delivery", 20*time.Second,
		chromedp.Click(chromedp.CSS(`#d-options-actions button[data-action="skip"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#d-options [data-blocked]`)),
	)
	require.NotEmpty(t, h.dialogMessages(), "the skip was confirmed first")
	Eventually(t, 30*time.Second, 50*time.Millisecond, "the rest delivered", func() bool { return len(o.firstReceipts()) == 2 })
	var skipped string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT message_id FROM deliveries WHERE id = $1`, blocked).Scan(&skipped))
	var rest []string
	for _, id := range ids {
		if id != skipped {
			rest = append(rest, id)
		}
	}
	require.Equal(t, rest, o.firstReceipts(), "in acceptance order")
	require.True(t, strings.Contains(h.text("#d-options"), "moving"))
	h.requireNoErrors()
}
