package tuning_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/internal/tuning"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// bundle is a fresh database with a store and a tuner whose clock the test
// sets.
type bundle struct {
	db      *storetest.DB
	st      *store.Store
	now     time.Time
	tuner   *tuning.Tuner
	metrics *tuning.Metrics
}

func setup(t *testing.T, cfg tuning.Config) *bundle {
	t.Helper()
	db := storetest.New(t)
	b := &bundle{db: db, st: store.New(db.Pool, nil), metrics: tuning.NewMetrics(nil)}
	cfg.Actor = "tuning-test"
	b.tuner = tuning.New(cfg, tuning.Deps{Store: b.st, Now: func() time.Time { return b.now }, Metrics: b.metrics})
	return b
}

// class stores a custom class with breaker config c and auto_tune mode,
// created a month before start (the tests' clock is not the database's).
func (b *bundle) class(t *testing.T, name string, c breaker.Config, mode string) trafficclass.Class {
	t.Helper()
	cl := trafficclass.Default(name)
	cl.Breaker, cl.AutoTune = c, mode
	_, _, err := b.st.PutClass(context.Background(), cl)
	require.NoError(t, err)
	b.created(t, name, start.Add(-30*24*time.Hour))
	return cl
}

// created sets when class was created.
func (b *bundle) created(t *testing.T, class string, at time.Time) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE traffic_classes SET created_at = $2 WHERE name = $1`, class, at)
	require.NoError(t, err)
}

func (b *bundle) endpoint(t *testing.T, class string) string {
	t.Helper()
	e, err := b.st.CreateEndpoint(context.Background(), store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret, TrafficClass: class})
	require.NoError(t, err)
	return e.ID
}

// log writes rows, offsets from start, as an endpoint's attempts.
func (b *bundle) log(t *testing.T, endpointID string, start time.Time, rows []replay.Row) {
	t.Helper()
	src := make([][]any, len(rows))
	for i, r := range rows {
		src[i] = []any{"dlv_tuning", "msg_tuning", endpointID, 1, start.Add(r.TS), 1.0, r.Outcome.String()}
	}
	_, err := b.db.Pool.CopyFrom(context.Background(), pgx.Identifier{"delivery_attempts"},
		[]string{"delivery_id", "message_id", "endpoint_id", "attempt_number", "attempted_at", "duration_ms", "classification"},
		pgx.CopyFromRows(src))
	require.NoError(t, err)
}

func synth(t *testing.T, rps float64, seed uint64, phases ...replay.Phase) []replay.Row {
	t.Helper()
	rows, err := replay.Synth(replay.SynthConfig{RPS: rps, Phases: phases, Spacing: replay.SpacingPoisson, Seed: seed})
	require.NoError(t, err)
	return rows
}

func phase(name string, d time.Duration, rate float64) replay.Phase {
	return replay.Phase{Name: name, Duration: d, FailureRate: rate}
}

// The three shapes of the acceptance logs, over 40 minutes.
const span = 40 * time.Minute

var start = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

func outageShape(t *testing.T) []replay.Row {
	return synth(t, 10, 1, phase("before", 25*time.Minute, 0.02), phase("outage", 10*time.Second, 1), phase("after", span-25*time.Minute-10*time.Second, 0.02))
}

func noisyShape(t *testing.T) []replay.Row {
	return synth(t, 10, 2, phase("noisy", span, 0.2))
}

func quietShape(t *testing.T) []replay.Row {
	return synth(t, 1.0/60, 3, phase("quiet", span, 0))
}

// sweepOver replays, as `dispatcher replay --sweep --from-db` does, each
// endpoint's segments read back through replay.LoadAttempts (a quiet range
// as it is, an incident range with the rows before its start as the
// lead-in) with SweepTraces, the sweep's own ranking.
func sweepOver(t *testing.T, st *store.Store, configs []breaker.Config, segments map[string][]tuning.Segment) []replay.Candidate {
	t.Helper()
	var traces []replay.Trace
	for id, segs := range segments {
		for _, s := range segs {
			rows, err := replay.LoadAttempts(context.Background(), st, id, s.From, s.To)
			require.NoError(t, err)
			if len(rows) == 0 {
				continue
			}
			tr := replay.Trace{Rows: rows}
			if s.Incident != nil {
				for i := range rows {
					rows[i].Phase = replay.PhaseIncident
					if rows[i].Time().Before(*s.Incident) {
						rows[i].Phase = replay.PhaseLeadIn
					}
				}
				tr.Incident, tr.IncidentPhase = true, replay.PhaseIncident
			}
			traces = append(traces, tr)
		}
	}
	ranked, err := replay.SweepTraces(configs, traces, replay.SweepOptions{Seed: replay.DefaultSeed})
	require.NoError(t, err)
	return ranked
}

// TestPassReadsEachLogAsTheSweepDoes: the pass reads a class's logs an
// hour of the whole class at a time; each endpoint's rows are what
// replay.LoadAttempts reads for it alone, in (attempted_at, id) order
// across the hours, ties included, without blocked attempts and without
// another class's endpoint.
func TestPassReadsEachLogAsTheSweepDoes(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	b.class(t, "steady", breaker.DefaultConfig(), tuning.ModeRecommend)
	b.class(t, "other", breaker.DefaultConfig(), tuning.ModeRecommend)
	ids := []string{b.endpoint(t, "steady"), b.endpoint(t, "steady")}
	stranger := b.endpoint(t, "other")
	since := start.Add(-90 * time.Minute)
	until := since.Add(3*time.Hour + 20*time.Minute)
	for i, id := range append([]string{stranger}, ids...) {
		rows := synth(t, 0.5, uint64(10+i), phase("mixed", 3*time.Hour, 0.3))
		// Written out of time order, so that the pages hold them so too.
		rand.New(rand.NewPCG(uint64(i), 1)).Shuffle(len(rows), func(a, b int) { rows[a], rows[b] = rows[b], rows[a] })
		// Two outcomes at one instant: the one written first (the failure)
		// comes first.
		rows = append(rows, replay.Row{TS: 100 * time.Minute, Outcome: breaker.OutcomeFailure}, replay.Row{TS: 100 * time.Minute, Outcome: breaker.OutcomeSuccess})
		b.log(t, id, since.Add(10*time.Minute), rows)
	}
	_, err := b.db.Pool.Exec(ctx, `
		INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, classification)
		VALUES ('dlv_tuning', 'msg_tuning', $1, 1, $2, 0, 'blocked')`, ids[0], since.Add(2*time.Hour))
	require.NoError(t, err)

	logs, err := b.tuner.ReadLogs(ctx, ids, since, until)
	require.NoError(t, err)
	require.Len(t, logs, len(ids))
	for i, id := range ids {
		want, err := replay.LoadAttempts(ctx, b.st, id, since, until)
		require.NoError(t, err)
		require.Greater(t, len(want), 2000, "the log spans several reads")
		require.Equal(t, want, logs[i], "endpoint %d", i)
	}
}

// TestPassRecommendsFromTheSweepsRanking: over the three acceptance
// shapes in one class, the pass finds the outage (and nothing in the noisy
// or the quiet endpoint), and what it recommends is what Decide picks from
// the sweep's ranking over the same ranges and grid.
func TestPassRecommendsFromTheSweepsRanking(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	b.class(t, "mixed", breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
	ids := map[string][]replay.Row{b.endpoint(t, "mixed"): outageShape(t), b.endpoint(t, "mixed"): noisyShape(t), b.endpoint(t, "mixed"): quietShape(t)}
	for id, rows := range ids {
		b.log(t, id, start, rows)
	}
	b.now = start.Add(span)
	rec, configs, segments, err := b.tuner.PassDetail(ctx, "mixed", start, start.Add(span))
	require.NoError(t, err)
	require.Equal(t, 3, rec.Evidence.Endpoints)
	require.Equal(t, 1, rec.Evidence.Incidents, "the outage, and nothing in the noise: %+v", rec.Evidence)
	for _, e := range rec.Evidence.PerEndpoint {
		if len(e.Incidents) == 1 {
			in := e.Incidents[0]
			require.WithinDuration(t, start.Add(25*time.Minute), in.From, 2*time.Second)
			require.InDelta(t, 10, in.To.Sub(in.From).Seconds(), 2)
		}
	}
	t.Logf("status %s, %d configs, reasons %v", rec.Status, len(configs), rec.Reasons)
	ranked := sweepOver(t, b.st, configs, segments)
	want := tuning.Decide(breaker.DefaultConfig(), ranked)
	require.Equal(t, want.Status, rec.Status, rec.Reasons)
	switch rec.Status {
	case tuning.StatusProposed:
		require.Equal(t, *want.Proposed, breaker.Config(*rec.Proposed))
		require.Equal(t, want.Best.OpensQuiet, rec.Figures.Proposed.OpensQuiet)
	case tuning.StatusKept:
	default:
		t.Fatalf("status %s", rec.Status)
	}
	stored, err := tuning.Get(ctx, b.st, "mixed")
	require.NoError(t, err)
	require.Equal(t, rec.Status, stored.Status)
}

// TestFalseTrippingClassGetsAProposalWithoutQuietOpens: consecutive 3 trips
// on the noisy endpoint's 20% errors; the proposal trips on none of it,
// and once applied the next pass keeps it.
func TestFalseTrippingClassGetsAProposalWithoutQuietOpens(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	c := breaker.DefaultConfig()
	c.Trip, c.ConsecutiveFailures = breaker.TripConsecutive, 3
	b.class(t, "noisy", c, trafficclass.AutoTuneRecommend)
	b.log(t, b.endpoint(t, "noisy"), start, noisyShape(t))
	b.log(t, b.endpoint(t, "noisy"), start, outageShape(t))
	b.now = start.Add(span)
	rec, err := b.tuner.Pass(ctx, "noisy", start, start.Add(span), false)
	require.NoError(t, err)
	require.Equal(t, tuning.StatusProposed, rec.Status, rec.Reasons)
	require.Positive(t, rec.Figures.Current.OpensQuiet)
	require.Zero(t, rec.Figures.Proposed.OpensQuiet)
	require.Equal(t, 1, rec.Figures.Proposed.IncidentsDetected, "it still catches the outage")
	require.Equal(t, breaker.TripRate, rec.Proposed.Trip)

	// An admin applies it; the next pass over the same log keeps it.
	_, err = tuning.Apply(ctx, b.st, rec, "admin", tuning.StatusProposed)
	require.NoError(t, err)
	again, err := b.tuner.Pass(ctx, "noisy", start, start.Add(span), false)
	require.NoError(t, err)
	require.Equal(t, tuning.StatusKept, again.Status, again.Reasons)
	history, err := b.st.ListTunings(ctx, "noisy", 10)
	require.NoError(t, err)
	require.Len(t, history, 1)
	require.Equal(t, "admin", history[0].Actor)
	require.Contains(t, string(history[0].Figures), `"opens_quiet"`)
	require.Contains(t, string(history[0].Evidence), `"since"`)
}

// TestTooLittleEvidenceKeepsTheConfig: a few minutes of traffic in a
// 40-minute range is a stated reason, not a change.
func TestTooLittleEvidenceKeepsTheConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	c := breaker.DefaultConfig()
	c.Trip, c.ConsecutiveFailures = breaker.TripConsecutive, 3
	b.class(t, "sparse", c, trafficclass.AutoTuneRecommend)
	b.log(t, b.endpoint(t, "sparse"), start, synth(t, 0.05, 4, phase("noisy", span, 0.2)))
	b.now = start.Add(span)
	rec, err := b.tuner.Pass(ctx, "sparse", start, start.Add(span), false)
	require.NoError(t, err)
	require.Equal(t, tuning.StatusKept, rec.Status)
	require.Nil(t, rec.Proposed)
	require.Contains(t, fmt.Sprint(rec.Reasons), "too little evidence")
}

// TestTuningLockMakesASecondPassWait: a pass of a class refuses to run
// while another holds the class's lock.
func TestTuningLockMakesASecondPassWait(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	b.class(t, "busy", breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.st.WithTuningLock(ctx, "busy", func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	_, err := b.tuner.Pass(ctx, "busy", start, start.Add(span), false)
	require.ErrorIs(t, err, store.ErrTuningBusy)
	close(release)
	require.NoError(t, <-done)
	_, err = b.tuner.Pass(ctx, "busy", start, start.Add(span), false)
	require.NoError(t, err)
}

// shadowCase stores a class in apply with a proposal made by hand and
// returns its endpoint.
func shadowCase(t *testing.T, b *bundle, name string, current, proposed breaker.Config, mode string) string {
	t.Helper()
	b.class(t, name, current, mode)
	id := b.endpoint(t, name)
	cur, prop := tuning.ClassConfig(current), tuning.ClassConfig(proposed)
	rec := tuning.Recommendation{Class: name, Status: tuning.StatusProposed, Current: &cur, Proposed: &prop, Reasons: []string{"by hand"}}
	body, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, b.st.SaveRecommendation(context.Background(), store.Recommendation{Class: name, Status: "proposed", Body: body}, "", nil))
	return id
}

// TestShadowThatDisagreesBlocksTheApply: a proposal that trips on the 20%
// noise the live config rides through is rejected after its shadow, and
// the class keeps its config; one that agrees is applied, into the
// history with its figures.
func TestShadowThatDisagreesBlocksTheApply(t *testing.T) {
	t.Parallel()
	shadow, lag := 10*time.Minute, 30*time.Second
	b := setup(t, tuning.Config{Shadow: shadow, Lag: lag})
	ctx := context.Background()
	current := breaker.DefaultConfig()
	current.FailureRateThreshold = 0.6
	touchy := current
	touchy.Trip, touchy.ConsecutiveFailures = breaker.TripConsecutive, 3
	calmer := current
	calmer.FailureRateThreshold = 0.7

	bad := shadowCase(t, b, "touchy", current, touchy, trafficclass.AutoTuneApply)
	good := shadowCase(t, b, "calm", current, calmer, trafficclass.AutoTuneApply)
	b.now = start
	require.NoError(t, b.tuner.Advance(ctx))
	for _, class := range []string{"touchy", "calm"} {
		rec, err := tuning.Get(ctx, b.st, class)
		require.NoError(t, err)
		require.Equal(t, tuning.StatusShadowing, rec.Status)
		require.Equal(t, start, rec.Shadow.Since)
		require.Equal(t, start.Add(shadow), rec.Shadow.Until)
	}
	noise := synth(t, 10, 5, phase("noisy", shadow, 0.2))
	b.log(t, bad, start, noise)
	b.log(t, good, start, noise)

	// Halfway, the shadows have read the log up to the lag.
	b.now = start.Add(shadow / 2)
	require.NoError(t, b.tuner.Advance(ctx))
	mid, err := tuning.Get(ctx, b.st, "touchy")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusShadowing, mid.Status)
	require.Equal(t, start.Add(shadow/2-lag), mid.Shadow.ReadUntil)
	require.NotEmpty(t, mid.Shadow.Opens, "consecutive 3 trips on 20% errors")
	midCalm, err := tuning.Get(ctx, b.st, "calm")
	require.NoError(t, err)
	require.Positive(t, mid.Shadow.Attempts)
	require.Equal(t, float64(mid.Shadow.Attempts+midCalm.Shadow.Attempts), testutil.ToFloat64(b.metrics.ShadowOutcomes),
		"the series counts every outcome the shadows fed")
	require.Positive(t, testutil.ToFloat64(b.metrics.ShadowSeconds))

	b.now = start.Add(shadow + lag)
	require.NoError(t, b.tuner.Advance(ctx))
	rejected, err := tuning.Get(ctx, b.st, "touchy")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusRejected, rejected.Status, rejected.Reasons)
	require.Contains(t, fmt.Sprint(rejected.Reasons), "quiet traffic")
	require.Positive(t, rejected.Shadow.Proposed.OpensQuiet)
	require.Zero(t, rejected.Shadow.Live.OpensQuiet)
	cl, err := b.st.GetClass(ctx, "touchy")
	require.NoError(t, err)
	require.Equal(t, current, cl.Breaker, "a disagreeing shadow changes nothing")

	applied, err := tuning.Get(ctx, b.st, "calm")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusApplied, applied.Status, applied.Reasons)
	cl, err = b.st.GetClass(ctx, "calm")
	require.NoError(t, err)
	require.Equal(t, calmer, cl.Breaker)
	history, err := b.st.ListTunings(ctx, "calm", 10)
	require.NoError(t, err)
	require.Len(t, history, 1)
	require.Equal(t, "tuning-test", history[0].Actor)
	require.Contains(t, string(history[0].Figures), `"shadow"`)
	var next tuning.ClassConfig
	require.NoError(t, json.Unmarshal(history[0].NewConfig, &next))
	require.Equal(t, calmer, breaker.Config(next))
}

// TestNothingAppliesWhileABreakerIsOpen: a finished shadow that agrees
// waits while a breaker of the class is open, and applies once it closed.
func TestNothingAppliesWhileABreakerIsOpen(t *testing.T) {
	t.Parallel()
	shadow, lag := 5*time.Minute, 10*time.Second
	b := setup(t, tuning.Config{Shadow: shadow, Lag: lag})
	ctx := context.Background()
	current := breaker.DefaultConfig()
	calmer := current
	calmer.FailureRateThreshold = 0.7
	id := shadowCase(t, b, "waits", current, calmer, trafficclass.AutoTuneApply)
	b.now = start
	require.NoError(t, b.tuner.Advance(ctx))
	b.log(t, id, start, synth(t, 5, 6, phase("fine", shadow, 0.01)))
	_, err := b.db.Pool.Exec(ctx, `UPDATE breaker_states SET state = 'open', open_until = now() + interval '1 hour' WHERE endpoint_id = $1`, id)
	require.NoError(t, err)

	b.now = start.Add(shadow + lag)
	require.NoError(t, b.tuner.Advance(ctx))
	rec, err := tuning.Get(ctx, b.st, "waits")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusShadowing, rec.Status)
	require.Contains(t, rec.Reasons[len(rec.Reasons)-1], "not closed")
	cl, err := b.st.GetClass(ctx, "waits")
	require.NoError(t, err)
	require.Equal(t, current, cl.Breaker)

	_, err = b.db.Pool.Exec(ctx, `UPDATE breaker_states SET state = 'half_open' WHERE endpoint_id = $1`, id)
	require.NoError(t, err)
	b.now = b.now.Add(time.Minute)
	require.NoError(t, b.tuner.Advance(ctx))
	cl, err = b.st.GetClass(ctx, "waits")
	require.NoError(t, err)
	require.Equal(t, current, cl.Breaker, "nor while half-open")

	_, err = b.db.Pool.Exec(ctx, `UPDATE breaker_states SET state = 'closed', open_until = NULL WHERE endpoint_id = $1`, id)
	require.NoError(t, err)
	b.now = b.now.Add(time.Minute)
	require.NoError(t, b.tuner.Advance(ctx))
	cl, err = b.st.GetClass(ctx, "waits")
	require.NoError(t, err)
	require.Equal(t, calmer, cl.Breaker)
}

// TestOffNeverChangesAnything: a class whose auto_tune is off gets no
// periodic pass, and a proposal left from before is never shadowed or
// applied; recommend shadows nothing either.
func TestOffNeverChangesAnything(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{Shadow: time.Minute, Lag: time.Second, Window: span})
	ctx := context.Background()
	c := breaker.DefaultConfig()
	c.Trip, c.ConsecutiveFailures = breaker.TripConsecutive, 3
	calmer := breaker.DefaultConfig()
	id := shadowCase(t, b, "still", c, calmer, trafficclass.AutoTuneOff)
	b.log(t, id, start, noisyShape(t))
	shadowCase(t, b, "asks", c, calmer, trafficclass.AutoTuneRecommend)
	before, err := b.st.GetRecommendation(ctx, "still")
	require.NoError(t, err)
	for i := range 3 {
		b.now = start.Add(span + time.Duration(i)*time.Hour)
		b.tuner.PassAll(ctx)
		require.NoError(t, b.tuner.Advance(ctx))
	}
	after, err := b.st.GetRecommendation(ctx, "still")
	require.NoError(t, err)
	require.Equal(t, before.Body, after.Body, "no pass ran for the class")
	require.Equal(t, "proposed", after.Status)
	for _, name := range []string{"still", "asks"} {
		cl, err := b.st.GetClass(ctx, name)
		require.NoError(t, err)
		require.Equal(t, c, cl.Breaker)
		history, err := b.st.ListTunings(ctx, name, 10)
		require.NoError(t, err)
		require.Empty(t, history)
	}
	asks, err := tuning.Get(ctx, b.st, "asks")
	require.NoError(t, err)
	require.NotEqual(t, tuning.StatusShadowing, asks.Status)
}

// TestRejectDropsAProposal: an admin's reject drops a proposal; a second
// reject finds nothing to reject.
func TestRejectDropsAProposal(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	shadowCase(t, b, "drop", breaker.DefaultConfig(), breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
	rec, err := tuning.Reject(ctx, b.st, "drop")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusRejected, rec.Status)
	_, err = tuning.Reject(ctx, b.st, "drop")
	require.ErrorIs(t, err, tuning.ErrNothingToReject)
	none, err := tuning.Get(ctx, b.st, "medium")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusNone, none.Status)
}

// TestPassesComeOnePerIntervalPerClass: a class never passed that has
// existed for an interval gets its first pass at once, and the next an
// interval after the last stored one, however many leaders come between; a
// class off never does.
func TestPassesComeOnePerIntervalPerClass(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{Interval: time.Hour, Window: span})
	ctx := context.Background()
	b.class(t, "hourly", breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
	b.class(t, "never", breaker.DefaultConfig(), trafficclass.AutoTuneOff)
	ranAt := func(class string) *time.Time {
		rec, err := tuning.Get(ctx, b.st, class)
		require.NoError(t, err)
		return rec.RanAt
	}
	b.now = start
	b.tuner.PassDue(ctx)
	require.Equal(t, start, *ranAt("hourly"), "never passed, created a month ago: due at once")
	b.now = start.Add(59 * time.Minute)
	restarted := tuning.New(tuning.Config{Interval: time.Hour, Window: span}, tuning.Deps{Store: b.st, Now: func() time.Time { return b.now }})
	restarted.PassDue(ctx)
	require.Equal(t, start, *ranAt("hourly"), "a new leader starts no pass that is not due")
	b.now = start.Add(time.Hour)
	restarted.PassDue(ctx)
	require.Equal(t, start.Add(time.Hour), *ranAt("hourly"))
	b.now = start.Add(90 * time.Minute)
	b.tuner.PassDue(ctx)
	require.Equal(t, start.Add(time.Hour), *ranAt("hourly"), "not due again yet")
	b.now = start.Add(2 * time.Hour)
	b.tuner.PassDue(ctx)
	require.Equal(t, start.Add(2*time.Hour), *ranAt("hourly"))
	require.Nil(t, ranAt("never"))
}

// TestFirstPassComesAnIntervalAfterTheClassWasCreated: a class created
// less than an interval ago has a log no older than its creation, so its
// first pass comes an interval after it was created, not at the leader's
// first poll (every class of a new installation would be passed over empty
// logs while the fleet takes its first traffic).
func TestFirstPassComesAnIntervalAfterTheClassWasCreated(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{Interval: time.Hour, Window: span})
	ctx := context.Background()
	b.class(t, "fresh", breaker.DefaultConfig(), trafficclass.AutoTuneRecommend)
	b.created(t, "fresh", start)
	ranAt := func() *time.Time {
		rec, err := tuning.Get(ctx, b.st, "fresh")
		require.NoError(t, err)
		return rec.RanAt
	}
	for _, at := range []time.Duration{0, time.Minute, 59 * time.Minute} {
		b.now = start.Add(at)
		b.tuner.PassDue(ctx)
		require.Nil(t, ranAt(), "created %s ago: not due", at)
	}
	b.now = start.Add(time.Hour)
	b.tuner.PassDue(ctx)
	require.NotNil(t, ranAt(), "created an interval ago: due")
	require.Equal(t, start.Add(time.Hour), *ranAt())
}

// TestShadowIsJudgedBeforeTheNextPass: with a shadow as long as the
// interval, the leader's polls (passes due, then shadows) judge the shadow
// before a pass of its class runs, and a disabled endpoint whose breaker
// stays open (it takes no traffic) does not hold the apply back.
func TestShadowIsJudgedBeforeTheNextPass(t *testing.T) {
	t.Parallel()
	interval, lag := 2*time.Hour, 30*time.Second
	b := setup(t, tuning.Config{Interval: interval, Shadow: interval, Lag: lag, Window: span})
	ctx := context.Background()
	current := breaker.DefaultConfig()
	calmer := current
	calmer.FailureRateThreshold = 0.7
	id := shadowCase(t, b, "judged", current, calmer, trafficclass.AutoTuneApply)
	b.log(t, id, start, synth(t, 2, 7, phase("fine", interval+time.Hour, 0.01)))
	idle := b.endpoint(t, "judged")
	_, err := b.db.Pool.Exec(ctx, `
		INSERT INTO breaker_states (endpoint_id, state, open_until) VALUES ($1, 'open', now() + interval '1 day')
		ON CONFLICT (endpoint_id) DO UPDATE SET state = 'open', open_until = now() + interval '1 day'`, idle)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE endpoints SET status = 'disabled', disabled_reason = 'auth_failures' WHERE id = $1`, idle)
	require.NoError(t, err)
	b.now = start
	require.NoError(t, b.tuner.Advance(ctx))
	for poll := time.Duration(0); poll <= interval+10*time.Minute; poll += 5 * time.Minute {
		b.now = start.Add(poll)
		b.tuner.PassDue(ctx)
		require.NoError(t, b.tuner.Advance(ctx))
		rec, err := tuning.Get(ctx, b.st, "judged")
		require.NoError(t, err)
		if rec.Status == tuning.StatusApplied {
			break
		}
		require.Equal(t, tuning.StatusShadowing, rec.Status, "at +%s: %v", poll, rec.Reasons)
	}
	rec, err := tuning.Get(ctx, b.st, "judged")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusApplied, rec.Status, rec.Reasons)
	cl, err := b.st.GetClass(ctx, "judged")
	require.NoError(t, err)
	require.Equal(t, calmer, cl.Breaker)
}

// TestShadowFeedsOutcomesWhenTheyEnded: the live breaker counts an attempt
// when it ends, so the shadow does too: a slow failure that ends after
// three quicker ones makes three failures in a row, and a consecutive-3
// shadow opens, at the slow attempt's end.
func TestShadowFeedsOutcomesWhenTheyEnded(t *testing.T) {
	t.Parallel()
	shadow, lag := 10*time.Minute, 30*time.Second
	b := setup(t, tuning.Config{Shadow: shadow, Lag: lag})
	ctx := context.Background()
	touchy := breaker.DefaultConfig()
	touchy.Trip, touchy.ConsecutiveFailures = breaker.TripConsecutive, 3
	id := shadowCase(t, b, "ends", breaker.DefaultConfig(), touchy, trafficclass.AutoTuneApply)
	b.now = start
	require.NoError(t, b.tuner.Advance(ctx))
	// Started in the order failure, success, failure, failure; ended in
	// the order success, failure, failure, failure.
	at := start.Add(time.Minute)
	for _, a := range []struct {
		off, took time.Duration
		outcome   string
	}{
		{0, 20 * time.Second, "failure"},
		{time.Second, 10 * time.Millisecond, "success"},
		{2 * time.Second, 10 * time.Millisecond, "failure"},
		{3 * time.Second, 10 * time.Millisecond, "failure"},
	} {
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO delivery_attempts (delivery_id, message_id, endpoint_id, attempt_number, attempted_at, duration_ms, classification)
			VALUES ('dlv_ends', 'msg_ends', $1, 1, $2, $3, $4)`, id, at.Add(a.off), float64(a.took.Milliseconds()), a.outcome)
		require.NoError(t, err)
	}
	b.now = start.Add(5 * time.Minute)
	require.NoError(t, b.tuner.Advance(ctx))
	rec, err := tuning.Get(ctx, b.st, "ends")
	require.NoError(t, err)
	require.Equal(t, 4, rec.Shadow.Attempts)
	require.Len(t, rec.Shadow.Opens, 1, "three failures in a row by their ends")
	require.Equal(t, at.Add(20*time.Second), rec.Shadow.Opens[0].At)
}

// countingStore counts the saves of recommendations.
type countingStore struct {
	*store.Store
	saves atomic.Int64
}

func (c *countingStore) SaveRecommendation(ctx context.Context, r store.Recommendation, event string, data map[string]any) error {
	c.saves.Add(1)
	return c.Store.SaveRecommendation(ctx, r, event, data)
}

// TestShadowProgressIsNotRewrittenEveryPoll: a shadow polled every 10 s
// for 10 minutes without a would-be open stores its progress about ten
// times, not at every poll.
func TestShadowProgressIsNotRewrittenEveryPoll(t *testing.T) {
	t.Parallel()
	shadow, lag := 10*time.Minute, 30*time.Second
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	current := breaker.DefaultConfig()
	calmer := current
	calmer.FailureRateThreshold = 0.7
	id := shadowCase(t, b, "steady", current, calmer, trafficclass.AutoTuneApply)
	b.log(t, id, start, synth(t, 5, 8, phase("fine", shadow+time.Minute, 0.01)))
	counting := &countingStore{Store: b.st}
	tu := tuning.New(tuning.Config{Shadow: shadow, Lag: lag, Actor: "tuning-test"},
		tuning.Deps{Store: counting, Now: func() time.Time { return b.now }})
	polls := 0
	for poll := time.Duration(0); poll <= shadow+lag+10*time.Second; poll += 10 * time.Second {
		b.now = start.Add(poll)
		require.NoError(t, tu.Advance(ctx))
		polls++
	}
	rec, err := tuning.Get(ctx, b.st, "steady")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusApplied, rec.Status, rec.Reasons)
	require.LessOrEqual(t, counting.saves.Load(), int64(13), "%d saves in %d polls", counting.saves.Load(), polls)
}

// TestShadowReadsBehindTheLongestTimeout: an endpoint whose own timeout
// exceeds the request timeout moves the shadow's reading back by the
// difference, so that its slow attempts are logged before it reads them.
func TestShadowReadsBehindTheLongestTimeout(t *testing.T) {
	t.Parallel()
	lag := 30 * time.Second
	b := setup(t, tuning.Config{Shadow: 10 * time.Minute, Lag: lag, Timeout: 10 * time.Second})
	ctx := context.Background()
	calmer := breaker.DefaultConfig()
	calmer.FailureRateThreshold = 0.7
	id := shadowCase(t, b, "slow", breaker.DefaultConfig(), calmer, trafficclass.AutoTuneApply)
	_, err := b.db.Pool.Exec(ctx, `UPDATE endpoints SET timeout_ms = 60000 WHERE id = $1`, id)
	require.NoError(t, err)
	b.now = start
	require.NoError(t, b.tuner.Advance(ctx))
	b.now = start.Add(5 * time.Minute)
	require.NoError(t, b.tuner.Advance(ctx))
	rec, err := tuning.Get(ctx, b.st, "slow")
	require.NoError(t, err)
	require.Equal(t, b.now.Add(-lag-50*time.Second), rec.Shadow.ReadUntil)
}

// TestQueuedPassesRunOnTheLeader: passes requested through the store
// (POST .../tune queues them) run on the leader, one at a time, oldest
// first, each over its own range, and end done.
func TestQueuedPassesRunOnTheLeader(t *testing.T) {
	t.Parallel()
	b := setup(t, tuning.Config{})
	ctx := context.Background()
	c := breaker.DefaultConfig()
	c.Trip, c.ConsecutiveFailures = breaker.TripConsecutive, 3
	b.class(t, "noisy", c, trafficclass.AutoTuneRecommend)
	b.class(t, "quiet", breaker.DefaultConfig(), trafficclass.AutoTuneOff)
	b.log(t, b.endpoint(t, "noisy"), start, noisyShape(t))
	b.now = start.Add(span)
	_, err := b.st.QueueTune(ctx, "noisy", start, start.Add(span))
	require.NoError(t, err)
	_, err = b.st.QueueTune(ctx, "quiet", start, start.Add(span))
	require.NoError(t, err)
	b.tuner.RunQueued(ctx)
	for _, class := range []string{"noisy", "quiet"} {
		r, err := b.st.LatestTune(ctx, class)
		require.NoError(t, err)
		require.Equal(t, store.TuneDone, r.Status, r.Error)
		rec, err := tuning.Get(ctx, b.st, class)
		require.NoError(t, err)
		require.NotNil(t, rec.RanAt, class)
		require.Equal(t, start, rec.Evidence.Since)
	}
	noisy, err := tuning.Get(ctx, b.st, "noisy")
	require.NoError(t, err)
	require.Equal(t, tuning.StatusProposed, noisy.Status, noisy.Reasons)
	_, ok, err := b.st.ClaimTune(ctx)
	require.NoError(t, err)
	require.False(t, ok, "nothing left queued")
}
