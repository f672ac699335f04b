package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

type (
	statsMinuteJSON struct {
		Minute      time.Time `json:"minute"`
		Success     int       `json:"success"`
		Failure     int       `json:"failure"`
		Ignore      int       `json:"ignore"`
		AuthFailure int       `json:"auth_failure"`
		Blocked     int       `json:"blocked"`
	}
	statsJSON struct {
		EndpointID  string            `json:"endpoint_id"`
		Now         time.Time         `json:"now"`
		From        time.Time         `json:"from"`
		Minutes     []statsMinuteJSON `json:"minutes"`
		Transitions []transitionJSON  `json:"transitions"`
	}
)

func TestEndpointStats(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	e := b.createEndpoint(t, "acme")
	quiet := b.createEndpoint(t, "acme")
	msg := b.sendMessage(t, "acme", "invoice.paid")
	var dlv deliveryJSON
	for _, d := range msg.Deliveries {
		if d.EndpointID == e.ID {
			dlv = d
		}
	}
	require.NotEmpty(t, dlv.ID)
	now := time.Now()
	b.seedAttempts(t, dlv,
		store.Attempt{AttemptNumber: 1, AttemptedAt: now, Classification: "failure"},
		store.Attempt{AttemptNumber: 2, AttemptedAt: now, Classification: "failure"},
		store.Attempt{AttemptNumber: 3, AttemptedAt: now, Classification: "success"},
		store.Attempt{AttemptNumber: 4, AttemptedAt: now.Add(-3 * time.Hour), Classification: "success"},
	)
	class, _ := trafficclass.Builtin(trafficclass.DefaultClass)
	_, err := b.store.OperateBreaker(ctx, e.ID, store.OperatorIsolate, class.Breaker, store.TransitionMeta{Actor: "alice", Note: "maintenance"})
	require.NoError(t, err)

	r := b.do(t, "GET", "/v1/endpoints/"+e.ID+"/stats", nil)
	requireStatus(t, http.StatusOK, r)
	st := decodeJSON[statsJSON](t, r)
	require.Equal(t, e.ID, st.EndpointID)
	require.Len(t, st.Minutes, 60, "an hour by default")
	require.Equal(t, st.From, st.Minutes[0].Minute)
	require.WithinDuration(t, time.Now(), st.Now, time.Minute, "now is the database's time")
	var success, failure int
	for _, m := range st.Minutes {
		success += m.Success
		failure += m.Failure
	}
	require.Equal(t, 1, success, "the attempt three hours ago is outside the hour")
	require.Equal(t, 2, failure)
	require.Len(t, st.Transitions, 1)
	tr := st.Transitions[0]
	require.Equal(t, "closed", tr.From)
	require.Equal(t, breaker.StateIsolated.String(), tr.To)
	require.Equal(t, "alice", tr.Actor)
	require.Equal(t, "maintenance", tr.Note)

	r = b.do(t, "GET", "/v1/endpoints/"+e.ID+"/stats?minutes=240", nil)
	requireStatus(t, http.StatusOK, r)
	st = decodeJSON[statsJSON](t, r)
	require.Len(t, st.Minutes, 240)
	success = 0
	for _, m := range st.Minutes {
		success += m.Success
	}
	require.Equal(t, 2, success, "four hours reach the old attempt")

	r = b.do(t, "GET", "/v1/endpoints/"+quiet.ID+"/stats?minutes=1", nil)
	requireStatus(t, http.StatusOK, r)
	st = decodeJSON[statsJSON](t, r)
	require.Len(t, st.Minutes, 1)
	require.Equal(t, statsMinuteJSON{Minute: st.From}, st.Minutes[0])
	require.NotNil(t, st.Transitions)
	require.Empty(t, st.Transitions)
}

func TestEndpointStatsRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	e := b.createEndpoint(t, "acme")
	for _, q := range []string{"0", "-1", "1441", "x", "1.5", "60m"} {
		requireFieldError(t, http.StatusBadRequest, b.do(t, "GET", "/v1/endpoints/"+e.ID+"/stats?minutes="+q, nil), "minutes")
	}
	requireProblem(t, http.StatusNotFound, b.do(t, "GET", "/v1/endpoints/"+missingID("ep")+"/stats", nil))
	requireProblem(t, http.StatusUnauthorized, b.do(t, "GET", "/v1/endpoints/"+e.ID+"/stats", nil, withoutAuth()))
}
