package tuning

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// shadowRun is a proposal's shadow breakers in this process: one pure
// breaker per endpoint of the class with the proposed config, fed every
// logged outcome of the shadow's range in order. It is rebuilt from the
// log (from the shadow's start) by whichever process advances the shadow,
// so a dispatcher that stops loses nothing. It keeps no outcome: the
// judgement reads the range's log again, an endpoint at a time.
type shadowRun struct {
	since    time.Time
	proposed breaker.Config
	read     time.Time
	breakers map[string]*breaker.Breaker
	outcomes int
	opens    []ShadowOpen
}

// Advance moves every proposal of a class in apply along: a proposal
// starts its shadow; a shadow reads the log up to Lag before now through
// its breakers, and once its range has been read it is judged (never
// while a breaker of the class is open or half-open) and applied or
// rejected. A proposal of a class no longer in apply stops shadowing.
func (t *Tuner) Advance(ctx context.Context) error {
	recs, err := t.deps.Store.ListRecommendations(ctx, string(StatusProposed), string(StatusShadowing))
	if err != nil {
		return err
	}
	live := map[string]bool{}
	var errs []error
	for _, sr := range recs {
		live[sr.Class] = true
		started := time.Now()
		err := t.advance(ctx, sr)
		t.deps.Metrics.ShadowSeconds.Add(time.Since(started).Seconds())
		if err != nil {
			errs = append(errs, fmt.Errorf("class %s: %w", sr.Class, err))
		}
	}
	for class := range t.shadows {
		if !live[class] {
			delete(t.shadows, class)
		}
	}
	return errors.Join(errs...)
}

func (t *Tuner) advance(ctx context.Context, sr store.Recommendation) error {
	c, err := t.deps.Store.GetClass(ctx, sr.Class)
	if err != nil {
		return err
	}
	rec, err := decodeRecommendation(sr.Body)
	if err != nil {
		return err
	}
	rec.Status, rec.Mode = Status(sr.Status), c.AutoTune
	if rec.Proposed == nil || rec.Current == nil {
		return nil
	}
	now := t.deps.Now().UTC()
	switch {
	case c.AutoTune != ModeApply:
		if rec.Status == StatusShadowing {
			rec.Status, rec.Shadow = StatusProposed, nil
			rec.Reasons = append(rec.Reasons, "the shadow stopped: the class's auto_tune is no longer apply")
			delete(t.shadows, c.Name)
			return saveAs(ctx, t.deps.Store, rec, Status(sr.Status), nil)
		}
		return nil
	case breaker.Config(*rec.Current) != c.Breaker:
		rec.Status = StatusRejected
		rec.Reasons = append(rec.Reasons, "rejected: the class's config changed since the pass")
		delete(t.shadows, c.Name)
		return saveAs(ctx, t.deps.Store, rec, Status(sr.Status), nil)
	case rec.Status == StatusProposed:
		rec.Status = StatusShadowing
		rec.Shadow = &Shadow{Since: now, Until: now.Add(t.cfg.Shadow), ReadUntil: now, Opens: []ShadowOpen{}}
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("shadowing beside the live config for %s", trafficclass.FormatDuration(t.cfg.Shadow)))
		return saveAs(ctx, t.deps.Store, rec, Status(sr.Status), nil)
	}
	if rec.Shadow == nil {
		return nil
	}
	ids, err := t.deps.Store.ClassEndpointIDs(ctx, c.Name)
	if err != nil {
		return err
	}
	run, err := t.follow(ctx, c.Name, rec, ids, now)
	if err != nil {
		return err
	}
	// The stored progress is for people to read (a leader that takes over
	// rebuilds the shadow from the log): it is rewritten on a new
	// would-be open, or once the shadow read a tenth of its range more.
	changed := len(rec.Shadow.Opens) != len(run.opens) || run.read.Sub(rec.Shadow.ReadUntil) >= rec.Shadow.Until.Sub(rec.Shadow.Since)/10
	rec.Shadow.ReadUntil, rec.Shadow.Attempts = run.read, run.outcomes
	rec.Shadow.Opens = append([]ShadowOpen{}, run.opens...)
	if run.read.Before(rec.Shadow.Until) {
		if changed {
			return saveAs(ctx, t.deps.Store, rec, Status(sr.Status), nil)
		}
		return nil
	}
	return t.judge(ctx, c, rec, ids, run)
}

// follow returns the class's shadow run, read up to Lag before now (more
// by how much the longest timeout of the class's endpoints exceeds
// Timeout, and no further than the shadow's end), rebuilding it from the shadow's start
// when this process has none.
func (t *Tuner) follow(ctx context.Context, class string, rec Recommendation, ids []string, now time.Time) (*shadowRun, error) {
	proposed := breaker.Config(*rec.Proposed)
	run := t.shadows[class]
	if run == nil || !run.since.Equal(rec.Shadow.Since) || run.proposed != proposed {
		run = &shadowRun{since: rec.Shadow.Since, proposed: proposed, read: rec.Shadow.Since,
			breakers: map[string]*breaker.Breaker{}}
		t.shadows[class] = run
	}
	lag := t.cfg.Lag
	if len(ids) > 0 {
		longest, err := t.deps.Store.LongestTimeout(ctx, ids)
		if err != nil {
			return nil, err
		}
		lag += max(longest-t.cfg.Timeout, 0)
	}
	to := now.Add(-lag)
	if to.After(rec.Shadow.Until) {
		to = rec.Shadow.Until
	}
	if !to.After(run.read) || len(ids) == 0 {
		if len(ids) == 0 && to.After(run.read) {
			run.read = to
		}
		return run, nil
	}
	// Each outcome counts when it ended, as the live breaker counted it.
	got, err := t.deps.Store.ClassAttemptEnds(ctx, ids, run.read, to, lag)
	if err != nil {
		return nil, err
	}
	fed := run.outcomes
	defer func() { t.deps.Metrics.ShadowOutcomes.Add(float64(run.outcomes - fed)) }()
	for _, id := range ids {
		b := run.breakers[id]
		if b == nil {
			nb := breaker.New(proposed)
			b = &nb
			run.breakers[id] = b
		}
		for _, a := range got[id] {
			if a.Classification == "blocked" {
				continue
			}
			o, err := breaker.ParseOutcome(a.Classification)
			if err != nil {
				return nil, fmt.Errorf("attempt %d: %w", a.ID, err)
			}
			run.outcomes++
			feed(b, proposed, a.At, o, t.deps.Rand, func(at time.Time) {
				run.opened(id, at)
			})
		}
	}
	run.read = to
	return run, nil
}

// feed passes one outcome through a shadow breaker as a replay does: the
// breaker decides whether the request would have been sent, and a sent
// one's outcome is recorded. onTrip is called for each trip from closed.
func feed(b *breaker.Breaker, c breaker.Config, at time.Time, o breaker.Outcome, rnd func() float64, onTrip func(time.Time)) {
	d := b.Allow(c, at)
	if d.Transition != nil && d.Transition.From == breaker.StateClosed && d.Transition.To == breaker.StateOpen {
		onTrip(at)
	}
	if d.Admission == breaker.Rejected {
		return
	}
	res := b.Record(c, at, d.Ticket, o, rnd)
	if res.Transition != nil && res.Transition.From == breaker.StateClosed && res.Transition.To == breaker.StateOpen {
		onTrip(at)
	}
}

func (r *shadowRun) opened(id string, at time.Time) {
	r.opens = append(r.opens, ShadowOpen{EndpointID: id, At: at.UTC()})
}

// BusyLookback is how recent an endpoint's last attempt must be for its
// breaker to hold an apply back: an endpoint without traffic (or disabled)
// whose breaker stays open has no incident in progress.
const BusyLookback = time.Hour

// judge compares a finished shadow with the live breakers and applies or
// rejects the proposal; it waits while a breaker of the class is not
// closed on an endpoint that takes traffic.
func (t *Tuner) judge(ctx context.Context, c trafficclass.Class, rec Recommendation, ids []string, run *shadowRun) error {
	if len(ids) > 0 {
		busy, err := t.deps.Store.BusyBreaker(ctx, ids, t.deps.Now().Add(-BusyLookback))
		if err != nil {
			return err
		}
		if busy != "" {
			why := "waiting to apply: the breaker of " + busy + ", which takes traffic, is not closed"
			if n := len(rec.Reasons); n == 0 || rec.Reasons[n-1] != why {
				rec.Reasons = append(rec.Reasons, why)
				return saveAs(ctx, t.deps.Store, rec, StatusShadowing, nil)
			}
			return nil
		}
	}
	var liveOpens []store.OpenRecord
	if len(ids) > 0 {
		var err error
		if liveOpens, err = t.deps.Store.ListOpens(ctx, ids, rec.Shadow.Since, rec.Shadow.Until); err != nil {
			return err
		}
	}
	var live []ShadowOpen
	recorded := map[string][]RecordedOpen{}
	for _, o := range liveOpens {
		if o.Shadow {
			continue
		}
		live = append(live, ShadowOpen{EndpointID: o.EndpointID, At: o.At})
		recorded[o.EndpointID] = append(recorded[o.EndpointID], RecordedOpen{At: o.At, Observations: o.Observations, Failures: o.Failures})
	}
	// One endpoint's log at a time, its incidents judged and dropped: the
	// judge keeps counts.
	var buf []replay.Row
	j, err := judgeEndpoints(ids, rec.Shadow.Opens, live, func(id string) ([]Incident, error) {
		var err error
		if buf, err = t.readLog(ctx, id, rec.Shadow.Since, rec.Shadow.Until, buf); err != nil {
			return nil, err
		}
		return Measure(id, buf, rec.Shadow.Since, rec.Shadow.Until, recorded[id]).Incidents, nil
	})
	if err != nil {
		return err
	}
	liveF, propF, ok, why := j.result()
	rec.Shadow.Live, rec.Shadow.Proposed = &liveF, &propF
	rec.Reasons = append(rec.Reasons, why...)
	delete(t.shadows, c.Name)
	if !ok {
		rec.Status = StatusRejected
		rec.remember()
		t.deps.Logger.InfoContext(ctx, "tuning_rejected", slog.String("class", c.Name), slog.Any("reasons", why))
		return saveAs(ctx, t.deps.Store, rec, StatusShadowing, nil)
	}
	if !BoundsOf(c).Allows(breaker.Config(*rec.Proposed)) {
		rec.Status = StatusRejected
		rec.Reasons = append(rec.Reasons, "rejected: the proposal is outside the class's tuning bounds")
		return saveAs(ctx, t.deps.Store, rec, StatusShadowing, nil)
	}
	rec.Status = StatusApplied
	rec.Reasons = append(rec.Reasons, "applied after its shadow by "+t.cfg.Actor)
	_, err = Apply(ctx, t.deps.Store, rec, t.cfg.Actor, StatusShadowing)
	if errors.Is(err, store.ErrClassChanged) {
		rec.Status = StatusRejected
		rec.Reasons = append(rec.Reasons[:len(rec.Reasons)-1], "rejected: the class's config changed during the shadow")
		return saveAs(ctx, t.deps.Store, rec, StatusShadowing, nil)
	}
	if err == nil {
		t.deps.Logger.InfoContext(ctx, "traffic_class_tuned", slog.String("class", c.Name),
			slog.String("from", describe(breaker.Config(*rec.Current))), slog.String("to", describe(breaker.Config(*rec.Proposed))))
	}
	return err
}

// Apply makes rec's proposal the class's config, with its history row and
// the traffic_class.tuned event, and stores rec as applied, if the stored
// recommendation's status is still expect. actor names who applied it.
func Apply(ctx context.Context, st Store, rec Recommendation, actor string, expect Status) (trafficclass.Class, error) {
	if rec.Proposed == nil || rec.Current == nil {
		return trafficclass.Class{}, ErrNothingToApply
	}
	rec.Status = StatusApplied
	body, err := encodeRecommendation(rec)
	if err != nil {
		return trafficclass.Class{}, err
	}
	enc := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	figures := map[string]any{"replay": rec.Figures}
	if rec.Shadow != nil {
		figures["shadow"] = map[string]any{"since": rec.Shadow.Since, "until": rec.Shadow.Until, "live": rec.Shadow.Live, "proposed": rec.Shadow.Proposed}
	}
	tu := store.Tuning{Actor: actor, OldConfig: enc(rec.Current), NewConfig: enc(rec.Proposed), Figures: enc(figures),
		Evidence: enc(rec.Evidence), Reasons: enc(rec.Reasons)}
	sr := store.Recommendation{Class: rec.Class, Status: string(StatusApplied), Body: body, Expect: string(expect)}
	if rec.Shadow != nil {
		sr.ShadowSince, sr.ShadowUntil = &rec.Shadow.Since, &rec.Shadow.Until
	}
	return st.ApplyTuning(ctx, rec.Class, breaker.Config(*rec.Current), breaker.Config(*rec.Proposed), tu, sr, eventData(rec))
}
