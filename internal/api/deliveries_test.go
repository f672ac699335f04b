package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

func TestGetDelivery(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	d := b.sendMessage(t, "acme", "a").Deliveries[0]
	get := func() deliveryJSON {
		r := b.do(t, "GET", "/v1/deliveries/"+d.ID, nil)
		requireStatus(t, http.StatusOK, r)
		return decodeJSON[deliveryJSON](t, r)
	}
	require.Equal(t, d, get())

	// A pending delivery whose job is running shows as delivering.
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1 WHERE id = $1`, *b.jobIDOf(t, d.ID))
	require.NoError(t, err)
	require.Equal(t, "delivering", get().Status)

	// The ledger's updates show through.
	at := time.Now().UTC().Truncate(time.Microsecond)
	code := 200
	require.NoError(t, b.store.RecordLedger(context.Background(), nil, []store.StatusUpdate{{
		DeliveryID: d.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 2, LastAttemptAt: &at, LastStatusCode: &code,
	}}))
	got := get()
	require.Equal(t, "delivered", got.Status)
	require.Equal(t, 2, got.AttemptCount)
	require.Equal(t, &code, got.LastStatusCode)
	require.True(t, at.Equal(*got.LastAttemptAt))
	require.True(t, at.Equal(*got.DeliveredAt))
	require.Nil(t, got.LastError)
	require.Nil(t, got.NextAttemptAt)
	require.Nil(t, got.BreakerOpenUntil)

	for _, id := range []string{missingID("dlv"), "dlv_x", d.MessageID} {
		p := requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/deliveries/"+id, nil))
		require.Equal(t, api.ProblemTypeBase+"not-found", p.Type)
	}
}

// attemptFixture is a set of deliveries with attempts recorded through the
// ledger at known times.
type attemptFixture struct {
	e, f       endpointJSON
	d1, d2, d3 deliveryJSON
	t0         time.Time
	ids        map[string]int64 // label -> attempt id
	labels     map[int64]string
}

func newAttemptFixture(t *testing.T, b *testBundle) *attemptFixture {
	t.Helper()
	fx := &attemptFixture{ids: map[string]int64{}, labels: map[int64]string{}}
	fx.e = b.createEndpoint(t, "acme")
	fx.f = b.createEndpoint(t, "acme", "invoice.*")
	m1 := b.sendMessage(t, "acme", "invoice.paid")
	for _, d := range m1.Deliveries {
		if d.EndpointID == fx.e.ID {
			fx.d1 = d
		} else {
			fx.d3 = d
		}
	}
	fx.d2 = b.sendMessage(t, "acme", "user.created").Deliveries[0]
	// Attempts follow their delivery's creation: lists of a delivery's
	// attempts read only the partitions since then.
	fx.t0 = time.Now().UTC().Truncate(time.Second)
	s503, s200, s401, s410 := 503, 200, 401, 410
	// Recorded in time order, one ledger batch each, so ids follow time.
	for _, a := range []struct {
		label string
		d     deliveryJSON
		at    store.Attempt
	}{
		{"a1", fx.d1, store.Attempt{AttemptNumber: 1, AttemptedAt: fx.t0, Duration: 120 * time.Millisecond, StatusCode: &s503, Classification: "failure", ResponseExcerpt: "busy"}},
		{"c1", fx.d3, store.Attempt{AttemptNumber: 1, AttemptedAt: fx.t0.Add(10 * time.Second), Classification: "blocked", ErrorClass: "ssrf_blocked"}},
		{"b1", fx.d2, store.Attempt{AttemptNumber: 1, AttemptedAt: fx.t0.Add(30 * time.Second), StatusCode: &s401, Classification: "auth_failure"}},
		{"a2", fx.d1, store.Attempt{AttemptNumber: 2, AttemptedAt: fx.t0.Add(time.Minute), Duration: 5 * time.Second, Classification: "failure", ErrorClass: "timeout"}},
		{"b2", fx.d2, store.Attempt{AttemptNumber: 2, AttemptedAt: fx.t0.Add(90 * time.Second), StatusCode: &s410, Classification: "ignore", Trial: true}},
		{"a3", fx.d1, store.Attempt{AttemptNumber: 3, AttemptedAt: fx.t0.Add(2 * time.Minute), Duration: 1500 * time.Microsecond, StatusCode: &s200, Classification: "success", ResponseExcerpt: "ok"}},
	} {
		b.seedAttempts(t, a.d, a.at)
		var id int64
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT max(id) FROM delivery_attempts`).Scan(&id))
		fx.ids[a.label], fx.labels[id] = id, a.label
	}
	return fx
}

func (fx *attemptFixture) at(d time.Duration) string { return fx.t0.Add(d).Format(time.RFC3339Nano) }

func TestListAttempts(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	fx := newAttemptFixture(t, b)
	ep := func(e endpointJSON) string { return "/v1/endpoints/" + e.ID + "/attempts" }
	dl := func(d deliveryJSON) string { return "/v1/deliveries/" + d.ID + "/attempts" }
	for _, tc := range []struct {
		name  string
		path  string
		query url.Values
		want  []string
	}{
		{"endpoint: all, newest first", ep(fx.e), nil, []string{"a3", "b2", "a2", "b1", "a1"}},
		{"endpoint: failures", ep(fx.e), url.Values{"outcome": {"failure"}}, []string{"a2", "a1"}},
		{"endpoint: successes", ep(fx.e), url.Values{"outcome": {"success"}}, []string{"a3"}},
		{"endpoint: ignored", ep(fx.e), url.Values{"outcome": {"ignore"}}, []string{"b2"}},
		{"endpoint: auth failures", ep(fx.e), url.Values{"outcome": {"auth_failure"}}, []string{"b1"}},
		{"endpoint: blocked ones are another endpoint's", ep(fx.e), url.Values{"outcome": {"blocked"}}, nil},
		{"endpoint: since is inclusive", ep(fx.e), url.Values{"since": {fx.at(30 * time.Second)}}, []string{"a3", "b2", "a2", "b1"}},
		{"endpoint: until is exclusive", ep(fx.e), url.Values{"until": {fx.at(time.Minute)}}, []string{"b1", "a1"}},
		{"endpoint: a window", ep(fx.e), url.Values{"since": {fx.at(30 * time.Second)}, "until": {fx.at(90 * time.Second)}}, []string{"a2", "b1"}},
		{"endpoint: a window in another zone", ep(fx.e), url.Values{"since": {fx.t0.Add(30 * time.Second).In(time.FixedZone("", 5*3600+1800)).Format(time.RFC3339)}}, []string{"a3", "b2", "a2", "b1"}},
		{"endpoint: outcome and window", ep(fx.e), url.Values{"outcome": {"failure"}, "since": {fx.at(time.Minute)}}, []string{"a2"}},
		{"endpoint: an empty window", ep(fx.e), url.Values{"since": {fx.at(time.Hour)}}, nil},
		{"other endpoint", ep(fx.f), nil, []string{"c1"}},
		{"delivery: all", dl(fx.d1), nil, []string{"a3", "a2", "a1"}},
		{"delivery: failures", dl(fx.d1), url.Values{"outcome": {"failure"}}, []string{"a2", "a1"}},
		{"delivery: until", dl(fx.d2), url.Values{"until": {fx.at(time.Minute)}}, []string{"b1"}},
		{"delivery: other", dl(fx.d3), nil, []string{"c1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, limit := range []int{0, 1, 2, 3, 250} {
				got, pages := b.pageAttempts(t, tc.path, tc.query, limit)
				var labels []string
				for _, a := range got {
					labels = append(labels, fx.labels[a.ID])
				}
				require.Equal(t, tc.want, labels, "limit %d", limit)
				if limit > 0 {
					require.Equal(t, max(1, (len(tc.want)+limit-1)/limit), pages, "limit %d: no empty trailing page", limit)
				}
			}
		})
	}

	t.Run("fields", func(t *testing.T) {
		t.Parallel()
		got, _ := b.pageAttempts(t, ep(fx.e), nil, 0)
		byLabel := map[string]attemptJSON{}
		for _, a := range got {
			byLabel[fx.labels[a.ID]] = a
		}
		require.Equal(t, attemptJSON{
			ID: fx.ids["a1"], DeliveryID: fx.d1.ID, MessageID: fx.d1.MessageID, EndpointID: fx.e.ID,
			AttemptNumber: 1, AttemptedAt: fx.t0, DurationMS: 120, StatusCode: ptr(503), Classification: "failure",
			ResponseExcerpt: "busy",
		}, withUTC(byLabel["a1"]))
		require.Equal(t, attemptJSON{
			ID: fx.ids["a2"], DeliveryID: fx.d1.ID, MessageID: fx.d1.MessageID, EndpointID: fx.e.ID,
			AttemptNumber: 2, AttemptedAt: fx.t0.Add(time.Minute), DurationMS: 5000, ErrorClass: ptr("timeout"),
			Classification: "failure",
		}, withUTC(byLabel["a2"]))
		require.Equal(t, 1.5, byLabel["a3"].DurationMS)
		require.True(t, byLabel["b2"].Trial)
	})
}

func withUTC(a attemptJSON) attemptJSON {
	a.AttemptedAt = a.AttemptedAt.UTC()
	return a
}

// pageAttempts follows next_cursor from the first page of path and returns
// every attempt and the number of pages; limit 0 leaves the default.
func (b *testBundle) pageAttempts(t *testing.T, path string, query url.Values, limit int) ([]attemptJSON, int) {
	t.Helper()
	var out []attemptJSON
	after := ""
	for pages := 1; ; pages++ {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		if limit > 0 {
			q.Set("limit", fmt.Sprint(limit))
		}
		if after != "" {
			q.Set("after", after)
		}
		r := b.do(t, "GET", path+"?"+q.Encode(), nil)
		requireStatus(t, http.StatusOK, r)
		page := decodeJSON[listJSON[attemptJSON]](t, r)
		if limit > 0 {
			require.LessOrEqual(t, len(page.Data), limit)
		}
		out = append(out, page.Data...)
		if page.NextCursor == nil {
			return out, pages
		}
		last := page.Data[len(page.Data)-1]
		require.Equal(t, fmt.Sprintf("%d_%d", last.AttemptedAt.UnixMicro(), last.ID), *page.NextCursor, "the cursor is the last attempt's time and id")
		after = *page.NextCursor
		require.Less(t, pages, 1000, "pagination does not end")
	}
}

func TestListAttemptsRejectsBadParameters(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	fx := newAttemptFixture(t, b)
	for _, path := range []string{"/v1/endpoints/" + fx.e.ID + "/attempts", "/v1/deliveries/" + fx.d1.ID + "/attempts"} {
		for _, tc := range []struct{ query, field string }{
			{"outcome=teapot", "outcome"},
			{"outcome=SUCCESS", "outcome"},
			{"outcome=delivered", "outcome"},
			{"limit=251", "limit"},
			{"limit=0", "limit"},
			{"limit=x", "limit"},
			{"after=abc", "after"},
			{"after=0", "after"},
			{"after=-5", "after"},
			{"after=99999999999999999999", "after"},
			{"since=yesterday", "since"},
			{"since=2026-03-14", "since"},
			{"until=2026-13-01T00:00:00Z", "until"},
			{"until=1710000000", "until"},
		} {
			t.Run(path+"?"+tc.query, func(t *testing.T) {
				t.Parallel()
				p := requireFieldError(t, http.StatusBadRequest, b.do(t, "GET", path+"?"+tc.query, nil), tc.field)
				require.Len(t, p.Errors, 1)
			})
		}
	}
	t.Run("every fault at once", func(t *testing.T) {
		t.Parallel()
		p := requireProblem(t, http.StatusBadRequest, b.do(t, "GET", "/v1/endpoints/"+fx.e.ID+"/attempts?outcome=x&limit=0&after=y&since=z&until=w", nil))
		var fields []string
		for _, f := range p.Errors {
			fields = append(fields, f.Field)
		}
		require.ElementsMatch(t, []string{"outcome", "limit", "after", "since", "until"}, fields)
	})
	t.Run("missing parents", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/v1/endpoints/" + missingID("ep") + "/attempts", "/v1/deliveries/" + missingID("dlv") + "/attempts"} {
			requireProblem(t, http.StatusNotFound, b.do(t, "GET", path, nil))
		}
	})
}

// TestListAttemptsPaginationIsStable pages through attempts made in the same
// millisecond, while new attempts are recorded between pages: each attempt
// that existed when the listing started shows up exactly once, newest first.
func TestListAttemptsPaginationIsStable(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	d := b.sendMessage(t, "acme", "a").Deliveries[0]
	at := time.Now().Truncate(time.Millisecond)
	batch := make([]store.Attempt, 40)
	for i := range batch {
		batch[i] = store.Attempt{AttemptNumber: i + 1, AttemptedAt: at}
	}
	b.seedAttempts(t, d, batch...)
	// existing lists the attempts there are now, in one page.
	existing := func() []int64 {
		all, pages := b.pageAttempts(t, "/v1/deliveries/"+d.ID+"/attempts", nil, 250)
		require.Equal(t, 1, pages)
		var out []int64
		for _, a := range all {
			out = append(out, a.ID)
		}
		require.True(t, slices.IsSortedFunc(out, func(x, y int64) int { return int(y - x) }), "newest first")
		return out
	}
	require.Len(t, existing(), 40)

	for _, limit := range []int{1, 3, 7, 39, 40, 43} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			want := existing()
			var got []int64
			after := ""
			for page := 1; ; page++ {
				q := fmt.Sprintf("/v1/deliveries/%s/attempts?limit=%d&since=%s", d.ID, limit, url.QueryEscape(at.Format(time.RFC3339Nano)))
				if after != "" {
					q += "&after=" + after
				}
				list := decodeJSON[listJSON[attemptJSON]](t, b.do(t, "GET", q, nil))
				for _, a := range list.Data {
					got = append(got, a.ID)
				}
				if page <= 3 {
					// Newer attempts land before the cursor: never seen by
					// the later pages of this listing.
					b.seedAttempts(t, d, store.Attempt{AttemptNumber: 100, AttemptedAt: at})
				}
				if list.NextCursor == nil {
					break
				}
				after = *list.NextCursor
			}
			require.Equal(t, want, got)
		})
	}
}

func TestRetryDelivery(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	d := b.sendMessage(t, "acme", "a").Deliveries[0]
	firstJob := *b.jobIDOf(t, d.ID)
	path := "/v1/deliveries/" + d.ID + "/retry"

	p := requireProblem(t, http.StatusConflict, b.do(t, "POST", path, nil))
	require.Equal(t, api.ProblemTypeBase+"conflict", p.Type)
	require.Equal(t, "only a failed delivery can be retried", p.Detail)

	for series := 1; series <= 3; series++ {
		b.markFailed(t, d, series, 8*series)
		require.Equal(t, "failed", decodeJSON[deliveryJSON](t, b.do(t, "GET", "/v1/deliveries/"+d.ID, nil)).Status)
		before := b.counts(t)

		r := b.do(t, "POST", path, nil)
		requireStatus(t, http.StatusAccepted, r)
		got := decodeJSON[deliveryJSON](t, r)
		require.Equal(t, "pending", got.Status)
		require.Equal(t, series+1, got.Series)
		require.Equal(t, 8*series, got.AttemptCount, "attempts keep counting across series")
		require.Nil(t, got.NextAttemptAt)
		require.Equal(t, e.ID, got.EndpointID)

		after := b.counts(t)
		require.Equal(t, before["river_job"]+1, after["river_job"], "one new job")
		before["river_job"] = after["river_job"]
		require.Equal(t, before, after, "nothing else written")
		jobs := b.jobs(t)
		job := jobs[len(jobs)-1]
		require.NotEqual(t, firstJob, job.ID)
		require.Equal(t, &job.ID, b.jobIDOf(t, d.ID))
		require.Equal(t, delivery.DeliverArgs{
			DeliveryID: d.ID, MessageID: d.MessageID, EndpointID: e.ID, EventType: "a",
			Series: series + 1, AttemptOffset: 8 * series,
		}, job.Args)

		// Pending again: not retryable until it fails again.
		requireProblem(t, http.StatusConflict, b.do(t, "POST", path, nil))
	}
}

func TestRetryDeliveryRefusesAnythingButFailed(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	b.createEndpoint(t, "acme")
	held := b.createEndpoint(t, "acme")
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+held.ID+"/disable", nil))
	m := b.sendMessage(t, "acme", "a")
	var pending, heldD deliveryJSON
	for _, d := range m.Deliveries {
		if d.EndpointID == held.ID {
			heldD = d
		} else {
			pending = d
		}
	}
	delivered := b.sendMessage(t, "acme", "b").Deliveries[0]
	waiting := b.sendMessage(t, "acme", "c").Deliveries[0]
	now := time.Now()
	until := now.Add(time.Minute)
	require.NoError(t, b.store.RecordLedger(ctx, nil, []store.StatusUpdate{
		{DeliveryID: delivered.ID, Series: 1, Status: store.DeliveryDelivered, AttemptCount: 1, LastAttemptAt: &now},
		{DeliveryID: waiting.ID, Series: 1, Status: store.DeliveryWaiting, BreakerOpenUntil: &until},
	}))
	before := b.counts(t)
	for _, tc := range []struct {
		status string
		d      deliveryJSON
	}{{"pending", pending}, {"held", heldD}, {"delivered", delivered}, {"waiting", waiting}} {
		t.Run(tc.status, func(t *testing.T) {
			got := decodeJSON[deliveryJSON](t, b.do(t, "GET", "/v1/deliveries/"+tc.d.ID, nil))
			require.Equal(t, tc.status, got.Status)
			requireProblem(t, http.StatusConflict, b.do(t, "POST", "/v1/deliveries/"+tc.d.ID+"/retry", nil))
			require.Equal(t, got, decodeJSON[deliveryJSON](t, b.do(t, "GET", "/v1/deliveries/"+tc.d.ID, nil)), "unchanged")
		})
	}
	require.Equal(t, before, b.counts(t))
	requireProblem(t, http.StatusNotFound, b.do(t, "POST", "/v1/deliveries/"+missingID("dlv")+"/retry", nil))
}
