package api_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

func TestCreateEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createClass(t, map[string]any{"name": "bulk_1"})
	const secret = "whsec_Dx1gsDwxK9pmGkLqSbqSQFRx2EZD2KRbTfVMdbLkq5g="
	for _, tc := range []struct {
		name string
		req  map[string]any
		want endpointJSON // ID and timestamps are not compared
	}{
		{
			name: "defaults",
			req:  map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook"},
			want: endpointJSON{TenantID: "acme", URL: "https://acme.example/hook", EventTypes: []string{},
				TrafficClass: "auto", Metadata: map[string]string{}, HeaderNames: []string{}, Signing: "hmac", Status: "enabled"},
		},
		{
			name: "every field",
			req: map[string]any{
				"tenant_id": "acme:eu@1", "url": "http://93.184.216.34:8080/hooks?x=1", "description": "billing",
				"event_types": []string{"invoice.*", "user.created", "*"}, "secret": secret,
				"traffic_class": "bulk_1", "metadata": map[string]string{"team": "billing", "cost.center": "42"},
				"headers": map[string]string{"X-Route": "billing", "authorization": "Bearer rcv_1"},
			},
			want: endpointJSON{TenantID: "acme:eu@1", URL: "http://93.184.216.34:8080/hooks?x=1", Description: "billing",
				EventTypes: []string{"invoice.*", "user.created", "*"}, TrafficClass: "bulk_1",
				Metadata:    map[string]string{"team": "billing", "cost.center": "42"},
				HeaderNames: []string{"X-Route", "authorization"}, Signing: "hmac", Status: "enabled"},
		},
		{
			// Limits count characters, as the document's maxLength does, not bytes.
			name: "multibyte text at the limits",
			req: map[string]any{
				"tenant_id": "acme", "url": "https://acme.example/" + strings.Repeat("é", 2048-len("https://acme.example/")),
				"description": strings.Repeat("é", 1024), "metadata": map[string]string{"k": strings.Repeat("ü", 1024)},
			},
			want: endpointJSON{TenantID: "acme", URL: "https://acme.example/" + strings.Repeat("é", 2048-len("https://acme.example/")),
				Description: strings.Repeat("é", 1024), EventTypes: []string{}, TrafficClass: "auto",
				Metadata: map[string]string{"k": strings.Repeat("ü", 1024)}, HeaderNames: []string{}, Signing: "hmac", Status: "enabled"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := time.Now().Add(-time.Second)
			r := b.do(t, "POST", "/v1/endpoints", tc.req)
			requireStatus(t, http.StatusCreated, r)
			got := decodeJSON[endpointJSON](t, r)
			require.Equal(t, "/v1/endpoints/"+got.ID, r.Header.Get("Location"))
			require.True(t, strings.HasPrefix(got.ID, "ep_"))
			require.WithinRange(t, got.CreatedAt, before, time.Now().Add(time.Second))
			require.Equal(t, got.CreatedAt, got.UpdatedAt)
			tc.want.ID, tc.want.CreatedAt, tc.want.UpdatedAt = got.ID, got.CreatedAt, got.UpdatedAt
			// No case sets delivery options: the defaults.
			tc.want.Ordering, tc.want.OnExhausted, tc.want.Filter = "unordered", "skip", json.RawMessage("null")
			tc.want.Type, tc.want.Destination = "http", json.RawMessage("null")
			require.Equal(t, tc.want, got)

			fetched := b.do(t, "GET", r.Header.Get("Location"), nil)
			requireStatus(t, http.StatusOK, fetched)
			require.Equal(t, got, decodeJSON[endpointJSON](t, fetched))

			sec := b.do(t, "GET", r.Header.Get("Location")+"/secret", nil)
			requireStatus(t, http.StatusOK, sec)
			require.Equal(t, "no-store", sec.Header.Get("Cache-Control"))
			s := decodeJSON[secretJSON](t, sec)
			if want, ok := tc.req["secret"]; ok {
				require.Equal(t, want, s.Secret)
			} else {
				_, err := delivery.ParseSecret(s.Secret)
				require.NoError(t, err, "a generated secret is a valid one")
			}
			require.Nil(t, s.PreviousSecret)
			require.Nil(t, s.PreviousSecretExpiresAt)
		})
	}
}

func TestGeneratedSecretsDiffer(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	seen := map[string]bool{}
	for range 5 {
		e := b.createEndpoint(t, "acme")
		s := decodeJSON[secretJSON](t, b.do(t, "GET", "/v1/endpoints/"+e.ID+"/secret", nil))
		require.False(t, seen[s.Secret])
		seen[s.Secret] = true
	}
}

func TestNilRandUsesCryptoRand(t *testing.T) {
	t.Parallel()
	// Deps.Rand left nil: secrets come from crypto/rand, not a panic.
	_, b := setup(t, func(d *api.Deps) { d.Rand = nil })
	e := b.createEndpoint(t, "acme")
	first := decodeJSON[secretJSON](t, b.do(t, "GET", "/v1/endpoints/"+e.ID+"/secret", nil))
	_, err := delivery.ParseSecret(first.Secret)
	require.NoError(t, err)
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+e.ID+"/secret/rotate", nil))
	rotated := decodeJSON[secretJSON](t, b.do(t, "GET", "/v1/endpoints/"+e.ID+"/secret", nil))
	require.NotEqual(t, first.Secret, rotated.Secret)
	_, err = delivery.ParseSecret(rotated.Secret)
	require.NoError(t, err)
}

func TestUpdateEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createClass(t, map[string]any{"name": "slow-lane", "trip": "consecutive"})
	base := map[string]any{
		"tenant_id": "acme", "url": "https://acme.example/hook", "description": "old",
		"event_types": []string{"invoice.*"}, "metadata": map[string]string{"a": "1", "b": "2"},
	}
	for _, tc := range []struct {
		name  string
		patch map[string]any
		check func(t *testing.T, before, after endpointJSON)
	}{
		{"empty patch changes nothing", map[string]any{}, func(t *testing.T, before, after endpointJSON) {
			after.UpdatedAt = before.UpdatedAt
			require.Equal(t, before, after)
		}},
		{"url", map[string]any{"url": "https://acme.example/v2"}, func(t *testing.T, before, after endpointJSON) {
			require.Equal(t, "https://acme.example/v2", after.URL)
			require.Equal(t, before.Description, after.Description)
			require.Equal(t, before.EventTypes, after.EventTypes)
		}},
		{"description cleared", map[string]any{"description": ""}, func(t *testing.T, _, after endpointJSON) {
			require.Empty(t, after.Description)
		}},
		{"event types replaced", map[string]any{"event_types": []string{"user.created", "user.*"}}, func(t *testing.T, _, after endpointJSON) {
			require.Equal(t, []string{"user.created", "user.*"}, after.EventTypes)
		}},
		{"event types emptied means all", map[string]any{"event_types": []string{}}, func(t *testing.T, _, after endpointJSON) {
			require.Equal(t, []string{}, after.EventTypes)
		}},
		{"metadata replaced as a whole", map[string]any{"metadata": map[string]string{"c": "3"}}, func(t *testing.T, _, after endpointJSON) {
			require.Equal(t, map[string]string{"c": "3"}, after.Metadata)
		}},
		{"built-in traffic class", map[string]any{"traffic_class": "low"}, func(t *testing.T, _, after endpointJSON) {
			require.Equal(t, "low", after.TrafficClass)
		}},
		{"custom traffic class", map[string]any{"traffic_class": "slow-lane"}, func(t *testing.T, _, after endpointJSON) {
			require.Equal(t, "slow-lane", after.TrafficClass)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := b.do(t, "POST", "/v1/endpoints", base)
			requireStatus(t, http.StatusCreated, r)
			before := decodeJSON[endpointJSON](t, r)
			r = b.do(t, "PATCH", "/v1/endpoints/"+before.ID, tc.patch)
			requireStatus(t, http.StatusOK, r)
			after := decodeJSON[endpointJSON](t, r)
			require.Equal(t, before.ID, after.ID)
			require.Equal(t, before.TenantID, after.TenantID)
			require.Equal(t, before.CreatedAt, after.CreatedAt)
			require.False(t, after.UpdatedAt.Before(before.UpdatedAt))
			tc.check(t, before, after)
			got := decodeJSON[endpointJSON](t, b.do(t, "GET", "/v1/endpoints/"+before.ID, nil))
			require.Equal(t, after, got, "the update is stored")
		})
	}
}

func TestDisableAndEnableEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	path := "/v1/endpoints/" + e.ID
	for _, step := range []struct {
		action string
		status string
		reason *string
	}{
		{"disable", "disabled", ptr("manual")},
		{"disable", "disabled", ptr("manual")}, // idempotent
		{"enable", "enabled", nil},
		{"enable", "enabled", nil},
		{"disable", "disabled", ptr("manual")},
	} {
		r := b.do(t, "POST", path+"/"+step.action, nil)
		requireStatus(t, http.StatusOK, r)
		var got endpointJSON
		if step.action == "enable" {
			enabled := decodeJSON[enabledEndpointJSON](t, r)
			require.Equal(t, ptr(0), enabled.Releasing, "nothing held")
			got = enabled.endpointJSON
		} else {
			got = decodeJSON[endpointJSON](t, r)
		}
		require.Equal(t, step.status, got.Status)
		require.Equal(t, step.reason, got.DisabledReason)
		require.Equal(t, got, decodeJSON[endpointJSON](t, b.do(t, "GET", path, nil)))
	}
}

// TestEnableAnswersWithTheHeldCount: enabling an endpoint that holds
// deliveries answers with how many the dispatchers will release and queues
// none of them itself (no River job, every one still held).
func TestEnableAnswersWithTheHeldCount(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	path := "/v1/endpoints/" + e.ID
	requireStatus(t, http.StatusOK, b.do(t, "POST", path+"/disable", nil))
	for range 3 {
		b.sendMessage(t, "acme", "order.created")
	}
	before := b.counts(t)

	r := b.do(t, "POST", path+"/enable", nil)
	requireStatus(t, http.StatusOK, r)
	got := decodeJSON[enabledEndpointJSON](t, r)
	require.Equal(t, "enabled", got.Status)
	require.NotNil(t, got.Releasing, "the answer carries the count to release")
	require.Equal(t, 3, *got.Releasing)
	require.Equal(t, before["river_job"], b.counts(t)["river_job"], "the request queues no job")
	var held int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'held'`, e.ID).Scan(&held))
	require.Equal(t, 3, held, "the dispatchers release them, not the request")

	r = b.do(t, "POST", path+"/enable", nil)
	requireStatus(t, http.StatusOK, r)
	require.Equal(t, ptr(3), decodeJSON[enabledEndpointJSON](t, r).Releasing, "enabling again answers with what is still held")
}

// enabledEndpointJSON is the answer of an enable.
type enabledEndpointJSON struct {
	endpointJSON
	Releasing *int `json:"releasing"`
}

func TestDeleteEndpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	keep := b.createEndpoint(t, "acme")
	path := "/v1/endpoints/" + e.ID

	r := b.do(t, "DELETE", path, nil)
	requireStatus(t, http.StatusNoContent, r)
	require.Empty(t, r.Body)

	for _, tc := range []struct{ method, path string }{
		{"GET", path}, {"DELETE", path}, {"PATCH", path}, {"POST", path + "/disable"}, {"POST", path + "/enable"},
		{"GET", path + "/secret"}, {"POST", path + "/secret/rotate"}, {"GET", path + "/attempts"},
	} {
		var body any
		if tc.method == "PATCH" {
			body = map[string]any{"description": "x"}
		}
		p := requireProblem(t, http.StatusNotFound, b.do(t, tc.method, tc.path, body))
		require.Equal(t, api.ProblemTypeBase+"not-found", p.Type)
		require.Equal(t, tc.path, p.Instance)
	}

	list := decodeJSON[listJSON[endpointJSON]](t, b.do(t, "GET", "/v1/endpoints", nil))
	require.Equal(t, []string{keep.ID}, ids(list.Data))

	// A deleted endpoint receives nothing more.
	m := b.sendMessage(t, "acme", "a")
	require.Len(t, m.Deliveries, 1)
	require.Equal(t, keep.ID, m.Deliveries[0].EndpointID)
}

func TestRotateSecret(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	_, b := setup(t, func(d *api.Deps) {
		d.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	e := b.createEndpoint(t, "acme")
	path := "/v1/endpoints/" + e.ID
	secret := func() secretJSON {
		r := b.do(t, "GET", path+"/secret", nil)
		requireStatus(t, http.StatusOK, r)
		return decodeJSON[secretJSON](t, r)
	}
	first := secret()

	r := b.do(t, "POST", path+"/secret/rotate", nil)
	requireStatus(t, http.StatusOK, r)
	rotated := decodeJSON[endpointJSON](t, r)
	require.Equal(t, e.ID, rotated.ID)
	require.False(t, rotated.UpdatedAt.Before(e.UpdatedAt))

	second := secret()
	require.NotEqual(t, first.Secret, second.Secret)
	_, err := delivery.ParseSecret(second.Secret)
	require.NoError(t, err)
	require.Equal(t, &first.Secret, second.PreviousSecret, "the old secret keeps signing")
	require.NotNil(t, second.PreviousSecretExpiresAt)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), *second.PreviousSecretExpiresAt, time.Minute)

	// A second rotation retires the first secret at once.
	requireStatus(t, http.StatusOK, b.do(t, "POST", path+"/secret/rotate", nil))
	third := secret()
	require.Equal(t, &second.Secret, third.PreviousSecret)

	// After 24 hours only the current secret is shown.
	offset.Store(int64(23 * time.Hour))
	require.Equal(t, third, secret())
	offset.Store(int64(24*time.Hour + time.Minute))
	require.Equal(t, secretJSON{Signing: "hmac", Secret: third.Secret}, secret())
}

func TestListEndpoints(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	var acme, all []string
	for i := range 7 {
		acme = append(acme, b.createEndpoint(t, "acme").ID)
		all = append(all, acme[i])
		if i%2 == 0 {
			all = append(all, b.createEndpoint(t, "globex").ID)
		}
	}
	for _, tc := range []struct {
		name   string
		query  string
		limit  int
		want   []string
		npages int
	}{
		{"one tenant in pages of 3", "tenant_id=acme", 3, acme, 3},
		{"one tenant in pages of 7", "tenant_id=acme", 7, acme, 1},
		{"one tenant in pages of 1", "tenant_id=acme", 1, acme, 7},
		{"every tenant in pages of 4", "", 4, all, 3},
		{"every tenant in one page", "", 250, all, 1},
		{"every tenant with the default limit", "", 0, all, 1},
		{"an unknown tenant", "tenant_id=initech", 5, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, pages := b.pageEndpoints(t, tc.query, tc.limit)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.npages, pages)
		})
	}
}

// pageEndpoints lists endpoints page by page following next_cursor and
// returns their ids in order and the number of pages. Every full page but
// the last carries a cursor; limit 0 leaves the default.
func (b *testBundle) pageEndpoints(t *testing.T, query string, limit int) ([]string, int) {
	t.Helper()
	var got []string
	pages := 0
	after := ""
	for {
		q, err := url.ParseQuery(query)
		require.NoError(t, err)
		if limit > 0 {
			q.Set("limit", fmt.Sprint(limit))
		}
		if after != "" {
			q.Set("after", after)
		}
		r := b.do(t, "GET", "/v1/endpoints?"+q.Encode(), nil)
		requireStatus(t, http.StatusOK, r)
		page := decodeJSON[listJSON[endpointJSON]](t, r)
		pages++
		wantMax := limit
		if limit == 0 {
			wantMax = 50 // the default
		}
		require.LessOrEqual(t, len(page.Data), wantMax)
		got = append(got, ids(page.Data)...)
		if page.NextCursor == nil {
			return got, pages
		}
		require.Equal(t, page.Data[len(page.Data)-1].ID, *page.NextCursor)
		after = *page.NextCursor
		require.Less(t, pages, 1000, "pagination does not end")
	}
}

func TestListEndpointsRejectsBadParameters(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, tc := range []struct{ query, field string }{
		{"limit=251", "limit"},
		{"limit=1000", "limit"},
		{"limit=0", "limit"},
		{"limit=-1", "limit"},
		{"limit=ten", "limit"},
		{"limit=2.5", "limit"},
		{"tenant_id=-acme", "tenant_id"},
		{"tenant_id=" + strings.Repeat("a", 129), "tenant_id"},
		{"tenant_id=acme%20corp", "tenant_id"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			t.Parallel()
			p := requireFieldError(t, http.StatusBadRequest, b.do(t, "GET", "/v1/endpoints?"+tc.query, nil), tc.field)
			require.Len(t, p.Errors, 1)
		})
	}
}

// TestListEndpointsPaginationIsStable pages through endpoints whose ids share
// one millisecond (minted by this process, in order, and by "other
// processes", with random tails) while more endpoints are created between
// pages: every endpoint that existed when the listing started shows up
// exactly once, in id order.
func TestListEndpointsPaginationIsStable(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	ms := time.Now().Truncate(time.Millisecond)
	var existing []string
	for range 12 {
		existing = append(existing, store.NewID("ep", ms))
	}
	prefix := existing[0][:len("ep_")+10] // the 48-bit time part
	for range 12 {
		existing = append(existing, prefix+randomCrockford(t, 16))
	}
	for _, id := range existing {
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO endpoints (id, tenant_id, url, secret) VALUES ($1, 'acme', 'https://acme.example/', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')`, id)
		require.NoError(t, err)
	}
	// And some created concurrently through the API, likely within one
	// millisecond too.
	t.Run("concurrent creates", func(t *testing.T) {
		for i := range 8 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				b.createEndpoint(t, "acme")
			})
		}
	})
	list := decodeJSON[listJSON[endpointJSON]](t, b.do(t, "GET", "/v1/endpoints?limit=250", nil))
	existing = ids(list.Data)
	require.Len(t, existing, 32)
	require.True(t, slices.IsSorted(existing))

	for _, limit := range []int{1, 2, 3, 5, 31, 32} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			var got []string
			after := ""
			pages := 0
			for {
				q := fmt.Sprintf("/v1/endpoints?tenant_id=acme&limit=%d", limit)
				if after != "" {
					q += "&after=" + after
				}
				page := decodeJSON[listJSON[endpointJSON]](t, b.do(t, "GET", q, nil))
				got = append(got, ids(page.Data)...)
				// Creations between the first pages land after every cursor
				// (their ids are newer), so they may appear but never twice
				// and never in place of an older one.
				if pages++; pages <= 3 {
					b.createEndpoint(t, "acme")
				}
				if page.NextCursor == nil {
					break
				}
				after = *page.NextCursor
			}
			require.True(t, slices.IsSorted(got), "id order")
			require.Len(t, slices.Compact(slices.Clone(got)), len(got), "no duplicates")
			for _, id := range existing {
				require.Contains(t, got, id, "no gaps")
			}
		})
	}
}

func randomCrockford(t *testing.T, n int) string {
	t.Helper()
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	buf := make([]byte, n)
	_, err := rand.Read(buf)
	require.NoError(t, err)
	for i := range buf {
		buf[i] = alphabet[buf[i]%32]
	}
	return string(buf)
}

func ids(es []endpointJSON) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// TestJSONMediaTypes: bodies are read as JSON under any JSON media type,
// and without a Content-Type at all. The document lists application/json
// only, so the requests it does not describe are sent as lenient.
func TestJSONMediaTypes(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, tc := range []struct {
		contentType string
		documented  bool
	}{
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"Application/JSON", true},
		{"application/merge-patch+json", false},
		{"application/vnd.hookd+json; version=1", false},
		{"", false},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			t.Parallel()
			opts := []callOpt{withContentType(tc.contentType)}
			if !tc.documented {
				opts = append(opts, lenient())
			}
			r := b.do(t, "POST", "/v1/endpoints", `{"tenant_id":"acme","url":"https://acme.example/hook"}`, opts...)
			requireStatus(t, http.StatusCreated, r)
			e := decodeJSON[endpointJSON](t, r)
			r = b.do(t, "PATCH", "/v1/endpoints/"+e.ID, `{"description":"patched"}`, opts...)
			requireStatus(t, http.StatusOK, r)
			require.Equal(t, "patched", decodeJSON[endpointJSON](t, r).Description)
		})
	}
}
