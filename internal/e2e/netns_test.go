package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
)

// hostsClass trips the probed endpoint's breaker on three consecutive
// failures and lets one trial at a time through, one success closing it.
var hostsClass = map[string]any{
	"name": "probed", "trip": "consecutive", "consecutive_failures": 3, "window": "2s", "min_throughput": 20,
	"failure_rate_threshold": 0.5, "open_duration": "2s", "max_open_duration": "4s", "open_backoff": 1.5,
	"half_open_trials": 1, "half_open_concurrency": 1,
}

// hostsRequestTimeout is every attempt's timeout in TestFleetOnHostsOfTheirOwn.
const hostsRequestTimeout = 5 * time.Second

// cutSettles is how long after a cut the receiver may still see a request
// the cut host sent before it: the receiver stamps a request when its
// handler starts, which on a loaded machine comes after the bytes
// arrived. Such a request was in flight at the cut.
const cutSettles = time.Second

// TestFleetOnHostsOfTheirOwn runs three dispatchers, each on a host of
// its own (a network namespace joined to the test's by a veth pair),
// against one PostgreSQL, one api and one receiver. Under a load to 40
// endpoints (a fifth of them slow), an endpoint fails until its breaker
// opens; the dispatcher that sends its half-open trial has its link cut
// while that trial and some of the load are in flight, for 30 s (past the
// fleet's 6 s silence, and past the 20 s lease of the cut host's trial
// slot, so the others' probe is over by the restore), then restored. Then: nothing is lost; the receiver never has two trials in
// flight to the probed endpoint, nor does the attempt log; every delivery
// of the cut host's jobs is delivered by the other hosts within 30 s of
// the cut plus the attempt timeout; only requests in flight at the cut
// reach the receiver twice, once more each; the cut host sends nothing
// while cut, nor after the restore for a delivery another host
// delivered; and the attempt log is exact. HOOKD_NETNS_CUT sets another
// length of the cut.
func TestFleetOnHostsOfTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nw := StartNet(t, 3)
	pg := StartClusterOn(t, nw)
	db := pg.NewDatabase(t, "hookd")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- postgres log (last 30 lines) ---\n%s", lastLines(pg.Log(), 30))
		}
	})

	// The probed endpoint fails until its breaker is open; then the first
	// request, its first trial, is held until its host is cut and answered
	// 200 just after (the host never learns of it), well within the
	// attempt's timeout so that the receiver's count of trials in flight
	// is the dispatchers'. Later ones take 300 ms, so overlapping trials
	// would show.
	var probing atomic.Bool
	heldTrial := make(chan netip.Addr, 1)
	cutDone := make(chan struct{})
	var heldOnce sync.Once
	respond := func(r *deliverytest.Request) deliverytest.Response {
		switch {
		case r.Path == "/probed" && !probing.Load():
			return deliverytest.Response{Status: http.StatusInternalServerError}
		case r.Path == "/probed":
			held := false
			heldOnce.Do(func() { held = true })
			if !held {
				return deliverytest.Response{Delay: 300 * time.Millisecond}
			}
			heldTrial <- netip.MustParseAddr(r.Header.Get(SourceHeader))
			select {
			case <-cutDone:
				time.Sleep(500 * time.Millisecond) // the answer goes out while the link is down
			case <-time.After(hostsRequestTimeout - 2*time.Second):
			}
			return deliverytest.Response{}
		case strings.HasSuffix(r.Path, "/slow"):
			return deliverytest.Response{Delay: 1500 * time.Millisecond}
		default:
			return deliverytest.Response{Delay: 10 * time.Millisecond}
		}
	}
	rc := deliverytest.Start(t, deliverytest.Options{Secrets: []string{testSecret}, Respond: respond})
	front := StartFront(t, rc, nw.Addr)
	api := StartAPI(t, db.URL, map[string]string{"NO_MIGRATE": "true"})
	code, err := api.Do(ctx, "POST", "/v1/traffic-classes", hostsClass, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)

	const tenants, perTenant = 8, 5
	var paths []string
	for ti := range tenants {
		for i := range perTenant {
			path := fmt.Sprintf("/t%d/e%d", ti, i)
			if i == 0 {
				path = fmt.Sprintf("/t%d/slow", ti)
			}
			api.CreateEndpoint(t, map[string]any{"tenant_id": fmt.Sprintf("t%d", ti), "url": front.URL(path), "secret": testSecret})
			paths = append(paths, path)
		}
	}
	probed := api.CreateEndpoint(t, map[string]any{"tenant_id": "probed", "url": front.URL("/probed"), "secret": testSecret, "traffic_class": "probed"})
	paths = append(paths, "/probed")

	env := map[string]string{
		"WORKERS": "40", "MAX_PER_HOST": "100", "REQUEST_TIMEOUT": hostsRequestTimeout.String(),
		"RETRY_SCHEDULE": "0s" + strings.Repeat(",500ms", 5) + strings.Repeat(",1s", 40),
	}
	fleet := StartDispatchersOn(t, pg.URLOn(nw.Addr, "hookd"), env, nw.Hosts...)
	clientOf := map[netip.Addr]string{}
	for i, d := range fleet {
		require.NotEmpty(t, d.RiverClient, "%s logs its River client", d.Name)
		clientOf[nw.Hosts[i].Addr] = d.RiverClient
	}

	// The load: 12 messages a second, to each tenant's five endpoints in turn,
	// until stopLoad.
	var messages atomic.Int64
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(time.Second / 12)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stopLoad:
				return
			case <-tick.C:
			}
			var m Message
			code, err := api.Do(ctx, "POST", "/v1/messages", map[string]any{"tenant_id": fmt.Sprintf("t%d", n%tenants), "event_type": "order.created", "payload": map[string]any{"n": n}}, &m)
			if err != nil || code != http.StatusAccepted {
				t.Errorf("load message %d: %d %v", n, code, err)
				return
			}
			messages.Add(1)
		}
	}()
	var once sync.Once
	endLoad := func() { once.Do(func() { close(stopLoad); <-loadDone }) }
	t.Cleanup(endLoad)

	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, query, args...).Scan(&n))
		return n
	}
	sendProbed := func(n int) {
		for i := range n {
			m := api.SendMessage(t, "probed", "order.created", map[string]any{"probe": i})
			require.Len(t, m.Deliveries, 1)
		}
	}

	// Trip the probed endpoint's breaker, then queue more behind it.
	sendProbed(3)
	Eventually(t, time.Minute, 20*time.Millisecond, "the probed endpoint's breaker open", func() bool {
		return count(`SELECT count(*) FROM breaker_states WHERE endpoint_id = $1 AND state <> 'closed'`, probed.ID) == 1
	})
	probing.Store(true)
	sendProbed(5)
	var cutAddr netip.Addr
	select {
	case cutAddr = <-heldTrial:
	case <-time.After(time.Minute):
		t.Fatal("no trial to the probed endpoint within a minute of its breaker opening")
	}
	var cut *Host
	for _, h := range nw.Hosts {
		if h.Addr == cutAddr {
			cut = h
		}
	}
	require.NotNil(t, cut, "the trial came from a host of the test network: %s", cutAddr)
	fromCut := func(rs []SourcedRequest) (load, trials int) {
		for _, r := range rs {
			switch {
			case r.Source != cutAddr:
			case r.Path == "/probed":
				trials++
			default:
				load++
			}
		}
		return load, trials
	}
	// Mid-load: the trial's host has load requests in flight too (the slow
	// endpoints' take 1.5 s, so it soon has).
	Eventually(t, hostsRequestTimeout-3*time.Second, 5*time.Millisecond, "load in flight from the trial's host", func() bool {
		load, trials := fromCut(front.InFlight())
		return load > 0 && trials == 1
	})

	cut.Cut(t)
	cutAt := time.Now()
	close(cutDone)
	client := clientOf[cutAddr]
	// What the cut host was doing: its requests in flight, and the
	// deliveries of the jobs it was running (none of its writes can
	// reach the server any more).
	atCut := front.InFlight()
	// The deliveries of its running jobs not yet delivered, and those
	// recorded delivered, from one snapshot: the cut host's last ledger
	// write may still commit between two reads (the server had it before
	// the cut), and a delivery would then be neither lost nor in flight.
	snap, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	lost := []string{}
	rows, err := snap.Query(ctx, `
		SELECT d.id FROM river_job j
		JOIN deliveries d ON (j.kind = 'deliver' AND d.id = j.args->>'delivery_id')
			OR (j.kind = 'deliver_message' AND d.message_id = j.args->>'message_id'
				AND d.endpoint_id IN (SELECT jsonb_array_elements_text(j.args->'endpoints')))
		WHERE j.state = 'running' AND j.attempted_by[array_length(j.attempted_by, 1)] = $1 AND d.status <> 'delivered'`, client)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		lost = append(lost, id)
	}
	require.NoError(t, rows.Err())
	// The deliveries recorded delivered at the cut: a request of the cut
	// host's not among them was in flight at the cut for the fleet, its
	// answer not yet recorded (if answered, just before the cut).
	recordedAtCut := map[string]bool{}
	rows, err = snap.Query(ctx, `SELECT e.url, d.message_id FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id WHERE d.status = 'delivered'`)
	require.NoError(t, err)
	for rows.Next() {
		var url, msgID string
		require.NoError(t, rows.Scan(&url, &msgID))
		recordedAtCut[strings.TrimPrefix(url, front.base)+" "+msgID] = true
	}
	require.NoError(t, rows.Err())
	require.NoError(t, snap.Rollback(ctx))
	loadAtCut, trialsAtCut := fromCut(atCut)
	require.Equal(t, 1, trialsAtCut, "the cut lands mid-trial")
	require.Positive(t, loadAtCut, "the cut lands mid-load")
	if len(lost) == 0 {
		// Seen once on a loaded machine, not explained yet: the server
		// had none of the cut host's requests in flight in a job running
		// under its name. The deliveries of those requests (not recorded
		// at the cut) are then what the others must deliver: every check
		// below holds for them as it does for a running job's.
		logInFlightJobs(t, db.Pool, cutAddr, client, atCut, front)
		for _, r := range atCut {
			if r.Source != cutAddr || recordedAtCut[r.Key()] {
				continue
			}
			var id string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT d.id FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id
				WHERE e.url = $1 AND d.message_id = $2`, front.base+r.Path, r.MsgID).Scan(&id))
			lost = append(lost, id)
		}
	}
	require.NotEmpty(t, lost, "the cut host had deliveries in its running jobs or requests in flight")
	t.Logf("cut %s (%s) with %d requests of its own in flight (%d load, 1 trial; %d in all) and %d undelivered deliveries in its running jobs",
		cut.Name, cutAddr, loadAtCut+trialsAtCut, loadAtCut, len(atCut), len(lost))

	// The fleet's heartbeat finds it silent and makes its jobs available.
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the cut host's jobs rescued", func() bool {
		return count(`SELECT count(*) FROM river_job WHERE state = 'running' AND attempted_by[array_length(attempted_by, 1)] = $1`, client) == 0 &&
			count(`SELECT count(*) FROM hookd_dispatchers WHERE id = $1`, client) == 0
	})
	rescued := time.Since(cutAt)

	// The lost deliveries delivered by the others, watched from here on;
	// the link stays cut for 20 s in all (a schedule of faults, not
	// synchronisation): the probed endpoint's last trial slot is free
	// again only when the server ends the cut host's idle trial session,
	// the request timeout + 10 s after the trial began, and a cut no
	// longer than that would leave its delivery to the restored host.
	var recovered time.Duration
	lostDelivered := func() bool {
		if recovered == 0 && count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND status = 'delivered'`, lost) == len(lost) {
			recovered = time.Since(cutAt)
		}
		return recovered > 0
	}
	// Past the trial's lease (its 5 s timeout + 15 s), so the probe
	// the others make then is over by the restore.
	cutFor := 30 * time.Second
	if v := os.Getenv("HOOKD_NETNS_CUT"); v != "" {
		cutFor, err = time.ParseDuration(v)
		require.NoError(t, err, "HOOKD_NETNS_CUT")
	}
	for time.Since(cutAt) < cutFor {
		lostDelivered()
		time.Sleep(100 * time.Millisecond)
	}
	lostBeforeRestore := count(`SELECT count(*) FROM deliveries WHERE id = ANY($1) AND status = 'delivered'`, lost)
	cut.Restore(t)
	restoredAt := time.Now()
	sendProbed(2)
	// The load goes on past the restore, the restored host back in the
	// fleet beside the others.
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the restored host heartbeating again", func() bool {
		return count(`SELECT count(*) FROM hookd_dispatchers WHERE id = $1`, client) == 1
	})
	rejoined := time.Since(restoredAt)
	Eventually(t, 30*time.Second, 100*time.Millisecond, "the restored host sending again", func() bool {
		for _, r := range front.Requests() {
			if r.Source == cutAddr && r.Start.After(restoredAt) {
				return true
			}
		}
		return false
	})
	endLoad()
	sent := int(messages.Load())
	want := sent*perTenant + 10

	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		lostDelivered()
		if count(`SELECT count(*) FROM deliveries WHERE status = 'delivered'`) == want {
			break
		}
		if time.Now().After(deadline) {
			logUndelivered(t, db.Pool, cutAt, want, front)
			t.Fatalf("e2e: timed out after 2m0s waiting for every delivery delivered")
		}
	}
	require.Equal(t, want, count(`SELECT count(*) FROM deliveries`))
	t.Logf("the cut host's jobs rescued %.1f s after the cut, its deliveries all delivered %.1f s after it (%d of %d before the restore); restored after %.1f s, heartbeating again %.1f s later",
		rescued.Seconds(), recovered.Seconds(), lostBeforeRestore, len(lost), restoredAt.Sub(cutAt).Seconds(), rejoined.Seconds())
	require.Less(t, recovered, 30*time.Second+hostsRequestTimeout, "the cut host's deliveries delivered within 30 s of the cut plus an attempt's timeout")

	// Nothing lost.
	distinct := 0
	for _, p := range paths {
		st := rc.Stats(p)
		require.Zero(t, st.BadSignatures, p)
		distinct += st.DistinctDelivered
	}
	require.Equal(t, want, distinct, "every delivery reached its endpoint")
	// The attempt log is exact: one success per delivery, its attempt
	// count the highest number logged, no number logged twice. The cut
	// host's records of its requests in flight at the cut reach the
	// server after the restore, when the others have run those jobs again
	// (numbering their attempts the same): its fenced writes must leave
	// no row.
	var badSuccess, badCount int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		WITH a AS (
			SELECT delivery_id, max(attempt_number) AS top, count(DISTINCT attempt_number) AS numbers, count(*) AS n,
				count(*) FILTER (WHERE classification = 'success') AS successes
			FROM delivery_attempts GROUP BY delivery_id)
		SELECT count(*) FILTER (WHERE coalesce(a.successes, 0) <> 1),
			count(*) FILTER (WHERE coalesce(a.top, 0) <> d.attempt_count OR coalesce(a.numbers, 0) <> coalesce(a.n, 0))
		FROM deliveries d LEFT JOIN a ON a.delivery_id = d.id`).Scan(&badSuccess, &badCount))
	if badSuccess+badCount > 0 {
		logAttempts(t, db.Pool, cutAt, lost, front)
	}

	// Second sends: only of requests in flight at the cut, one each: the
	// cut host's requests that began before it (or as it settled) and
	// whose delivery was not recorded then (still waiting for their answer, or answered but
	// not yet recorded).
	reqs := front.Requests()
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].Start.Before(reqs[j].Start) })
	inFlightAtCut, answeredAtCut := map[string]bool{}, 0
	for _, r := range reqs {
		if r.Source == cutAddr && r.Start.Before(cutAt.Add(cutSettles)) && !recordedAtCut[r.Key()] {
			inFlightAtCut[r.Key()] = true
			if r.End.Before(cutAt) {
				answeredAtCut++
			}
		}
	}
	// byOthers: each delivery's first 2xx from a host that was not cut.
	firstOK, byOthers := map[string]SourcedRequest{}, map[string]SourcedRequest{}
	duplicates, okCount := 0, map[string]int{}
	var outside, afterRestore []string
	for _, r := range reqs {
		if !r.OK() {
			continue
		}
		if f, ok := byOthers[r.Key()]; r.Source != cutAddr && (!ok || r.End.Before(f.End)) {
			byOthers[r.Key()] = r
		}
		f, seen := firstOK[r.Key()]
		if !seen || r.End.Before(f.End) {
			firstOK[r.Key()] = r
		}
		if seen {
			duplicates++
			okCount[r.Key()]++
			if !inFlightAtCut[r.Key()] || okCount[r.Key()] > 1 {
				outside = append(outside, fmt.Sprintf("%s from %s at %s", r.Key(), r.Source, r.Start.Format(time.StampMilli)))
			}
		}
	}
	sentDuringCut, sentAfter := 0, 0
	for _, r := range reqs {
		if r.Source != cutAddr {
			continue
		}
		if r.Start.After(cutAt.Add(cutSettles)) && r.Start.Before(restoredAt) {
			sentDuringCut++
		}
		if r.Start.After(restoredAt) {
			sentAfter++
		}
		if f, ok := byOthers[r.Key()]; ok && r.Start.After(restoredAt) && f.End.Before(r.Start) {
			afterRestore = append(afterRestore, fmt.Sprintf("%s at %s, delivered by %s at %s", r.Key(), r.Start.Format(time.StampMilli), f.Source, f.End.Format(time.StampMilli)))
		}
	}
	// Resumed by the others: each of the cut host's deliveries got a 2xx
	// from another host, but one whose request was in flight at the cut:
	// its answer came back and the ledger's write (one statement) reached
	// the server as the link went down, so it is recorded, once, with no
	// reply to the cut host.
	lostKeys := map[string]string{}
	rows, err = db.Pool.Query(ctx, `SELECT d.id, e.url, d.message_id FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id WHERE d.id = ANY($1)`, lost)
	require.NoError(t, err)
	for rows.Next() {
		var id, url, msgID string
		require.NoError(t, rows.Scan(&id, &url, &msgID))
		lostKeys[strings.TrimPrefix(url, front.base)+" "+msgID] = id
	}
	require.NoError(t, rows.Err())
	require.Len(t, lostKeys, len(lost))
	var notByOthers []string
	for k := range lostKeys {
		if _, ok := byOthers[k]; !ok && !(firstOK[k].Source == cutAddr && inFlightAtCut[k]) {
			notByOthers = append(notByOthers, fmt.Sprintf("%s: first 2xx from %s at %s", k, firstOK[k].Source, firstOK[k].End.Format(time.StampMilli)))
		}
	}
	t.Logf("%d messages, %d deliveries; %d requests of the cut host's in flight at the cut (%d of them answered, not yet recorded), %d duplicates at the receiver; %d requests from the cut host after the restore",
		sent+10, want, len(inFlightAtCut), answeredAtCut, duplicates, sentAfter)
	require.Zero(t, sentDuringCut, "nothing from the cut host while its link was down")
	require.Empty(t, outside, "every duplicate is the one resend of a request in flight from the cut host at the cut")
	require.LessOrEqual(t, duplicates, len(inFlightAtCut))
	require.Empty(t, afterRestore, "the restored host sends nothing for a delivery already delivered")
	require.Empty(t, notByOthers, "the cut host's deliveries resumed by the other hosts")

	// Trials: every request to the probed endpoint that started while its
	// breaker was not closed, past the first second after it opened (when
	// only trials get through), never overlaps another.
	spans, _ := nonClosedSpans(t, db, probed.ID)
	periods := mergeSpans(spans)
	var probes []SourcedRequest
	for _, r := range reqs {
		for _, p := range periods {
			if r.Path == "/probed" && r.Start.After(p.from.Add(time.Second)) && r.Start.Before(p.to) {
				probes = append(probes, r)
			}
		}
	}
	maxTrials := maxOverlap(probes)
	for _, r := range probes {
		t.Logf("trial from %s: %+.1f s to %+.1f s of the cut, answered %d", r.Source, r.Start.Sub(cutAt).Seconds(), r.End.Sub(cutAt).Seconds(), r.Status)
	}
	var heldInPeriod bool
	for _, r := range probes {
		heldInPeriod = heldInPeriod || (r.Source == cutAddr && r.Start.Before(cutAt))
	}
	require.True(t, heldInPeriod, "the request held at the cut was a trial")
	trialRows, err := db.Pool.Query(ctx, `SELECT attempted_at, duration_ms, classification FROM delivery_attempts WHERE endpoint_id = $1 AND trial ORDER BY attempted_at`, probed.ID)
	require.NoError(t, err)
	for trialRows.Next() {
		var at time.Time
		var ms float64
		var class string
		require.NoError(t, trialRows.Scan(&at, &ms, &class))
		t.Logf("trial recorded: %+.1f s of the cut, %.0f ms, %s", at.Sub(cutAt).Seconds(), ms, class)
	}
	require.NoError(t, trialRows.Err())
	var attemptTrials, attemptOverlaps int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		WITH a AS (SELECT id, attempted_at AS s, attempted_at + duration_ms * interval '1 millisecond' AS e
			FROM delivery_attempts WHERE endpoint_id = $1 AND trial)
		SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM a x JOIN a y ON x.id < y.id AND x.s < y.e AND y.s < x.e)`,
		probed.ID).Scan(&attemptTrials, &attemptOverlaps))
	t.Logf("%d trials to the probed endpoint at the receiver (%d recorded), at most %d in flight at once", len(probes), attemptTrials, maxTrials)
	require.LessOrEqual(t, maxTrials, hostsClass["half_open_concurrency"].(int), "never two trials in flight at the receiver")
	require.Positive(t, attemptTrials, "trials recorded")
	require.Zero(t, attemptOverlaps, "never two recorded trials overlapping")

	// Checked last: each failure above says more about the run.
	require.Zero(t, badSuccess, "one logged success per delivery")
	require.Zero(t, badCount, "attempt counts match the attempt log, no number twice")
}

// mergeSpans joins the non-closed spans that follow one another (open,
// then half-open, then open again) into the periods between a trip and
// the next close.
func mergeSpans(spans []span) []span {
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			out[n-1].to = s.to
			continue
		}
		out = append(out, s)
	}
	return out
}

// maxOverlap is the most requests in flight at once among rs.
func maxOverlap(rs []SourcedRequest) int {
	most := 0
	for _, a := range rs {
		n := 0
		for _, b := range rs {
			if !b.Start.After(a.Start) && b.End.After(a.Start) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// logAttempts logs the attempts of every delivery whose attempt log is
// not exact, against the time of the cut.
func logAttempts(t *testing.T, pool *pgxpool.Pool, cutAt time.Time, lost []string, front *Front) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		WITH bad AS (
			SELECT d.id, d.status, d.attempt_count FROM deliveries d
			WHERE (SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.id AND a.classification = 'success') <> 1
				OR d.attempt_count <> (SELECT coalesce(max(attempt_number), 0) FROM delivery_attempts a WHERE a.delivery_id = d.id)
				OR (SELECT count(*) <> count(DISTINCT attempt_number) FROM delivery_attempts a WHERE a.delivery_id = d.id))
		SELECT bad.id, bad.status, bad.attempt_count, bad.id = ANY($1), a.attempt_number, a.attempted_at, a.duration_ms, a.classification, coalesce(a.status_code, 0), a.trial
		FROM bad LEFT JOIN delivery_attempts a ON a.delivery_id = bad.id ORDER BY bad.id, a.id`, lost)
	require.NoError(t, err)
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var id, status string
		var count int
		var wasLost bool
		var number *int
		var at *time.Time
		var ms *float64
		var class *string
		var code int
		var trial *bool
		require.NoError(t, rows.Scan(&id, &status, &count, &wasLost, &number, &at, &ms, &class, &code, &trial))
		if !seen[id] {
			seen[id] = true
			logDelivery(t, pool, cutAt, id, front)
		}
		if number == nil {
			t.Logf("delivery %s (%s, attempt_count %d, the cut host's: %v): no attempt logged", id, status, count, wasLost)
			continue
		}
		t.Logf("delivery %s (%s, attempt_count %d, the cut host's: %v): attempt %d at %+.2f s of the cut, %.0f ms, %s %d, trial %v",
			id, status, count, wasLost, *number, at.Sub(cutAt).Seconds(), *ms, *class, code, *trial)
	}
	require.NoError(t, rows.Err())
}

// logUndelivered logs, against the time of the cut, how many deliveries
// there are of the want expected, and the first ten not delivered with
// their jobs and requests: what a fleet that never finished left behind.
func logUndelivered(t *testing.T, pool *pgxpool.Pool, cutAt time.Time, want int, front *Front) {
	t.Helper()
	ctx := context.Background()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&n))
	t.Logf("%d deliveries of the %d expected", n, want)
	rows, err := pool.Query(ctx, `
		SELECT id, status, attempt_count, coalesce(job_id, 0), coalesce(next_attempt_at, 'epoch'), coalesce(last_error, '')
		FROM deliveries WHERE status <> 'delivered' ORDER BY id LIMIT 10`)
	require.NoError(t, err)
	type undelivered struct {
		id, status, lastError string
		attempts              int
		job                   int64
		next                  time.Time
	}
	var left []undelivered
	for rows.Next() {
		var u undelivered
		require.NoError(t, rows.Scan(&u.id, &u.status, &u.attempts, &u.job, &u.next, &u.lastError))
		left = append(left, u)
	}
	require.NoError(t, rows.Err())
	for _, u := range left {
		t.Logf("undelivered %s: %s, attempt_count %d, job %d, next attempt %+.2f s of the cut, last error %q",
			u.id, u.status, u.attempts, u.job, u.next.Sub(cutAt).Seconds(), u.lastError)
		logDelivery(t, pool, cutAt, u.id, front)
	}
}

// logDelivery logs the jobs of delivery id and the requests that carried
// it, against the time of the cut.
func logDelivery(t *testing.T, pool *pgxpool.Pool, cutAt time.Time, id string, front *Front) {
	t.Helper()
	ctx := context.Background()
	var msgID, url string
	require.NoError(t, pool.QueryRow(ctx, `SELECT d.message_id, e.url FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id WHERE d.id = $1`, id).Scan(&msgID, &url))
	logJobs(t, pool, id, func(at time.Time) string { return fmt.Sprintf("%+.2f s of the cut", at.Sub(cutAt).Seconds()) })
	for _, r := range front.Requests() {
		if r.MsgID == msgID && strings.HasSuffix(url, r.Path) {
			t.Logf("  request from %s: %+.2f s to %+.2f s of the cut, answered %d", r.Source, r.Start.Sub(cutAt).Seconds(), r.End.Sub(cutAt).Seconds(), r.Status)
		}
	}
}

// logInFlightJobs logs, for each request of the cut host's in flight at
// the cut, its delivery and that delivery's job as the server has them:
// why the cut host's running jobs held none of them.
func logInFlightJobs(t *testing.T, pool *pgxpool.Pool, cutAddr netip.Addr, client string, atCut []SourcedRequest, front *Front) {
	t.Helper()
	ctx := context.Background()
	t.Logf("the cut host's River client: %s", client)
	for _, r := range atCut {
		if r.Source != cutAddr {
			continue
		}
		var id, status, kind, state string
		var jobID *int64
		var by []string
		err := pool.QueryRow(ctx, `
			SELECT d.id, d.status, d.job_id, coalesce(j.kind, ''), coalesce(j.state::text, ''), coalesce(j.attempted_by, '{}')
			FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id LEFT JOIN river_job j ON j.id = d.job_id
			WHERE e.url = $1 AND d.message_id = $2`, front.base+r.Path, r.MsgID).Scan(&id, &status, &jobID, &kind, &state, &by)
		if err != nil {
			t.Logf("in flight at the cut: %s %s since %s: %v", r.Path, r.MsgID, r.Start.Format(time.StampMilli), err)
			continue
		}
		t.Logf("in flight at the cut: %s %s since %s: delivery %s %s, job %v %s %s attempted by %v",
			r.Path, r.MsgID, r.Start.Format(time.StampMilli), id, status, jobID, kind, state, by)
	}
	rows, err := pool.Query(ctx, `SELECT id, kind, state::text, attempted_by, args::text FROM river_job WHERE state = 'running' ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id int64
		var kind, state, args string
		var by []string
		require.NoError(t, rows.Scan(&id, &kind, &state, &by, &args))
		t.Logf("running job %d %s attempted by %v: %s", id, kind, by, args)
	}
	require.NoError(t, rows.Err())
}
