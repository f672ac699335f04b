package tuning

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/replay"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// Store is what tuning needs of the database.
type Store interface {
	GetClass(ctx context.Context, name string) (trafficclass.Class, error)
	ListClasses(ctx context.Context) ([]trafficclass.Class, error)
	ClassesCreated(ctx context.Context) (map[string]time.Time, error)
	ClassEndpointIDs(ctx context.Context, class string) ([]string, error)
	StreamEndpointOutcomes(ctx context.Context, endpointID string, since, until time.Time, fn func(store.AttemptOutcome) error) error
	ClassAttemptEnds(ctx context.Context, endpointIDs []string, since, until time.Time, lookback time.Duration) (map[string][]store.AttemptOutcome, error)
	LongestTimeout(ctx context.Context, endpointIDs []string) (time.Duration, error)
	ListOpens(ctx context.Context, endpointIDs []string, since, until time.Time) ([]store.OpenRecord, error)
	BusyBreaker(ctx context.Context, endpointIDs []string, since time.Time) (string, error)
	WithTuningLock(ctx context.Context, class string, fn func(context.Context) error) error
	GetRecommendation(ctx context.Context, class string) (store.Recommendation, error)
	ListRecommendations(ctx context.Context, statuses ...string) ([]store.Recommendation, error)
	SaveRecommendation(ctx context.Context, r store.Recommendation, event string, data map[string]any) error
	ApplyTuning(ctx context.Context, class string, expect, next breaker.Config, t store.Tuning, r store.Recommendation, data map[string]any) (trafficclass.Class, error)
	ListTunings(ctx context.Context, class string, limit int) ([]store.Tuning, error)
	ClaimTune(ctx context.Context) (store.TuneRequest, bool, error)
	FinishTune(ctx context.Context, id int64, failure string) error
	RequeueTunes(ctx context.Context) error
}

var _ Store = (*store.Store)(nil)

// Defaults of a Tuner's Config.
const (
	DefaultInterval = 24 * time.Hour
	DefaultWindow   = 7 * 24 * time.Hour
	DefaultShadow   = 24 * time.Hour
	// DefaultLag is how far behind the database clock a shadow reads the
	// log: an attempt is logged when the ledger writes it, after it ends,
	// so at least the longest an attempt takes plus the ledger's write
	// timeout.
	DefaultLag = 45 * time.Second
	// DefaultPace is the share of one core a periodic pass uses: it sleeps
	// between endpoints so that delivery keeps the machine.
	DefaultPace = 0.2
)

// Config tunes a Tuner.
type Config struct {
	// Interval is how often a pass runs over each class not off.
	Interval time.Duration
	// Window is how much of the log a periodic pass reads, up to now.
	Window time.Duration
	// Shadow is how long a proposal of a class in apply runs in shadow.
	Shadow time.Duration
	// Poll is how often the leader looks for passes due and advances the
	// shadows (and a process not leading tries to lead); zero means
	// Shadow/10 within [1 s, 1 min].
	Poll time.Duration
	// Lag is how far behind the clock shadows read: the request timeout
	// (Timeout) plus the ledger's write timeout and a flush, so that every
	// attempt that ended before it has been logged; an endpoint of the
	// class with a longer timeout of its own adds the difference. Zero
	// means DefaultLag.
	Lag time.Duration
	// Timeout is the request timeout Lag allows for.
	Timeout time.Duration
	// Pace is the share of one core a periodic pass may use (it sleeps
	// between endpoints); zero or less, or one and more, does not pace.
	Pace float64
	// Actor names this process in the history of applied changes.
	Actor string
	// Seed seeds the replays' jitter.
	Seed uint64
}

// Deps are a Tuner's collaborators.
type Deps struct {
	Store Store
	// Now is the database's time.
	Now    func() time.Time
	Logger *slog.Logger
	// Rand draws the shadow breakers' open jitter; nil means a seeded
	// source.
	Rand func() float64
	// Metrics counts the shadows' cost; nil counts nothing.
	Metrics *Metrics
}

// Tuner runs tuning passes and advances shadows.
type Tuner struct {
	cfg     Config
	deps    Deps
	shadows map[string]*shadowRun
}

// New returns a tuner, with cfg's zero fields at their defaults.
func New(cfg Config, deps Deps) *Tuner {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Shadow <= 0 {
		cfg.Shadow = DefaultShadow
	}
	if cfg.Poll <= 0 {
		cfg.Poll = min(max(cfg.Shadow/10, time.Second), time.Minute)
	}
	if cfg.Lag <= 0 {
		cfg.Lag = DefaultLag
	}
	if cfg.Seed == 0 {
		cfg.Seed = replay.DefaultSeed
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Rand == nil {
		deps.Rand = replay.NewRand(cfg.Seed)
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	return &Tuner{cfg: cfg, deps: deps, shadows: map[string]*shadowRun{}}
}

// leaderLock is the tuning lock the fleet's tuning leader holds: a name no
// class can have.
const leaderLock = "_leader"

// Run makes this process the fleet's tuning leader when no other process
// is (a session advisory lock, tried again every Poll), and as leader,
// every Poll, runs the passes requested on demand (RunQueued), a paced
// pass over each class whose stored last pass is Interval old (PassDue)
// and advances the shadows, until ctx ends.
func (t *Tuner) Run(ctx context.Context) {
	for {
		err := t.deps.Store.WithTuningLock(ctx, leaderLock, func(ctx context.Context) error {
			t.lead(ctx)
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrTuningBusy) && ctx.Err() == nil {
			t.deps.Logger.WarnContext(ctx, "tuning_lock_failed", slog.String("error", err.Error()))
		}
		wait := time.NewTimer(t.cfg.Poll)
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
	}
}

// lead is the leader's loop.
func (t *Tuner) lead(ctx context.Context) {
	poll := time.NewTicker(t.cfg.Poll)
	defer poll.Stop()
	// Only the leader runs requested passes: one left running was the last
	// leader's.
	if err := t.deps.Store.RequeueTunes(ctx); err != nil && ctx.Err() == nil {
		t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("error", err.Error()))
	}
	for {
		t.RunQueued(ctx)
		t.PassDue(ctx)
		if err := t.Advance(ctx); err != nil && ctx.Err() == nil {
			t.deps.Logger.WarnContext(ctx, "tuning_shadow_failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
}

// PassDue runs a paced pass over the last Window of each class not off
// whose stored last pass ran Interval ago or more, or that never had one
// and was created Interval ago or more, unless the class's proposal is
// shadowing: the shadow is judged first. The due time comes from the
// database, not from when this process began to lead, so a fleet deployed
// more often than Interval still tunes, and a restart starts no pass that
// is not due. A class never passed counts as passed when it was created:
// its log holds nothing older, so a pass at once (every class of a new
// installation, at its first start) would read 1,000 endpoints' empty logs
// while the fleet takes its first traffic, and propose nothing.
func (t *Tuner) PassDue(ctx context.Context) {
	recs, err := t.deps.Store.ListRecommendations(ctx, allStatuses...)
	if err != nil {
		t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("error", err.Error()))
		return
	}
	last, err := t.deps.Store.ClassesCreated(ctx)
	if err != nil {
		t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("error", err.Error()))
		return
	}
	shadowing := map[string]bool{}
	for _, r := range recs {
		if rec, err := decodeRecommendation(r.Body); err == nil && rec.RanAt != nil {
			last[r.Class] = *rec.RanAt
		}
		shadowing[r.Class] = r.Status == string(StatusShadowing)
	}
	now := t.deps.Now()
	t.passAll(ctx, func(class string) bool {
		at, ok := last[class]
		return !shadowing[class] && ok && now.Sub(at) >= t.cfg.Interval
	})
}

// RunQueued runs the passes requested on demand (store.QueueTune), one at
// a time, oldest first, paced as periodic ones, until none is queued; each
// request ends done, or failed with the pass's error.
func (t *Tuner) RunQueued(ctx context.Context) {
	for ctx.Err() == nil {
		r, ok, err := t.deps.Store.ClaimTune(ctx)
		if err != nil {
			t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("error", err.Error()))
			return
		}
		if !ok {
			return
		}
		failure := ""
		if _, err := t.Pass(ctx, r.Class, r.Since, r.Until, true); err != nil {
			if ctx.Err() != nil {
				// Left running: the next leader queues it again.
				return
			}
			t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("class", r.Class), slog.String("error", err.Error()))
			failure = err.Error()
		}
		if err := t.deps.Store.FinishTune(ctx, r.ID, failure); err != nil {
			t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("class", r.Class), slog.String("error", err.Error()))
			return
		}
	}
}

var allStatuses = []string{string(StatusKept), string(StatusProposed), string(StatusShadowing), string(StatusApplied), string(StatusRejected)}

// PassAll runs a paced pass over the last Window of every class whose
// auto_tune is not off; a class whose pass another process runs is
// skipped, a failed one logged.
func (t *Tuner) PassAll(ctx context.Context) {
	t.passAll(ctx, func(string) bool { return true })
}

func (t *Tuner) passAll(ctx context.Context, due func(class string) bool) {
	classes, err := t.deps.Store.ListClasses(ctx)
	if err != nil {
		t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("error", err.Error()))
		return
	}
	until := t.deps.Now()
	since := until.Add(-t.cfg.Window)
	for _, c := range classes {
		if c.AutoTune == ModeOff || !due(c.Name) {
			continue
		}
		_, err := t.Pass(ctx, c.Name, since, until, true)
		switch {
		case errors.Is(err, store.ErrTuningBusy):
			continue
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			t.deps.Logger.WarnContext(ctx, "tuning_failed", slog.String("class", c.Name), slog.String("error", err.Error()))
			continue
		}
	}
}

// readLog reads the log of endpoint id in [since, until) into buf (its
// rows dropped first), in (attempted_at, id) order without the attempts
// that never reached it (blocked), as replay.LoadAttempts reads them, and
// returns it: a pass reuses one buffer for every endpoint, so it holds one
// endpoint's log at a time.
func (t *Tuner) readLog(ctx context.Context, id string, since, until time.Time, buf []replay.Row) ([]replay.Row, error) {
	buf = buf[:0]
	err := t.deps.Store.StreamEndpointOutcomes(ctx, id, since, until, func(a store.AttemptOutcome) error {
		if a.Classification == "blocked" {
			return nil
		}
		o, err := breaker.ParseOutcome(a.Classification)
		if err != nil {
			return fmt.Errorf("attempt %d: %w", a.ID, err)
		}
		buf = append(buf, replay.Row{TS: time.Duration(a.At.UnixNano()), Outcome: o})
		return nil
	})
	if err != nil {
		return buf, fmt.Errorf("read log of %s: %w", id, err)
	}
	return buf, nil
}

// Pass runs a tuning pass of class over its endpoints' log in [since,
// until) under the class's tuning lock (store.ErrTuningBusy when another
// process holds it), stores the recommendation and returns it. A paced
// pass sleeps between endpoints to use no more than Config.Pace of a
// core.
func (t *Tuner) Pass(ctx context.Context, class string, since, until time.Time, paced bool) (Recommendation, error) {
	var out Recommendation
	err := t.deps.Store.WithTuningLock(ctx, class, func(ctx context.Context) error {
		var (
			used *passUsed
			err  error
		)
		out, used, err = t.pass(ctx, class, since, until, paced, false)
		if err != nil {
			return err
		}
		sp := used.spent
		attrs := []any{slog.String("class", class), slog.String("status", string(out.Status)), slog.Int("configs", out.Configs),
			slog.Float64("read_s", sp.read.Seconds()), slog.Float64("measure_s", sp.measure.Seconds()),
			slog.Float64("replay_s", sp.replay.Seconds()), slog.Float64("rested_s", sp.rested.Seconds()), slog.Int("held_rows", used.held)}
		if out.Evidence != nil {
			attrs = append(attrs, slog.Int("endpoints", out.Evidence.Endpoints), slog.Int("attempts", out.Evidence.Attempts))
		}
		t.deps.Logger.InfoContext(ctx, "tuning_pass", attrs...)
		return nil
	})
	return out, err
}

// spent is where a pass's time went: the work of each phase and the
// rests that pace it.
type spent struct {
	read, measure, replay, rested time.Duration
}

// pace adds busy to the pass's work, read of it reading the log and the
// rest to phase, and, in a paced pass, rests so that the pass uses no more
// than Config.Pace of a core.
func (t *Tuner) pace(ctx context.Context, paced bool, busy, read time.Duration, phase *time.Duration, sp *spent) {
	sp.read += read
	*phase += busy - read
	if !paced || !(t.cfg.Pace > 0 && t.cfg.Pace < 1) {
		return
	}
	started := time.Now()
	defer func() { sp.rested += time.Since(started) }()
	sleep := time.NewTimer(time.Duration(float64(busy) * (1/t.cfg.Pace - 1)))
	defer sleep.Stop()
	select {
	case <-ctx.Done():
	case <-sleep.C:
	}
}

// passUsed is what a pass ranked and replayed.
type passUsed struct {
	configs []breaker.Config
	// segments are the segments replayed, by endpoint, when the pass was
	// asked to keep them (tests); a pass cuts an endpoint's segments when
	// it needs them and keeps none.
	segments map[string][]Segment
	spent    spent
	// held is the most rows of the log the pass held at once: one
	// endpoint's log and its traces, never the class's.
	held int
}

// endpointKept is what a pass keeps of a counted endpoint between its
// reads of the log: the bounds of its incidents (for its segments) and
// its minutes with traffic (for its quiet time, dropped once counted).
type endpointKept struct {
	counted   bool
	attempts  int
	incidents incidentBounds
	active    activeSpans
}

// hold notes that the pass holds n rows of the log at once.
func (u *passUsed) hold(n int) { u.held = max(u.held, n) }

// traceRows is how many rows traces hold.
func traceRows(traces []replay.Trace) int {
	n := 0
	for _, tr := range traces {
		n += len(tr.Rows)
	}
	return n
}

func (t *Tuner) pass(ctx context.Context, name string, since, until time.Time, paced, keepSegments bool) (Recommendation, *passUsed, error) {
	c, err := t.deps.Store.GetClass(ctx, name)
	if err != nil {
		return Recommendation{}, nil, err
	}
	ids, err := t.deps.Store.ClassEndpointIDs(ctx, name)
	if err != nil {
		return Recommendation{}, nil, err
	}
	var opens []store.OpenRecord
	if len(ids) > 0 {
		if opens, err = t.deps.Store.ListOpens(ctx, ids, since, until); err != nil {
			return Recommendation{}, nil, err
		}
	}
	byEndpoint := map[string][]RecordedOpen{}
	for _, o := range opens {
		if !o.Shadow {
			byEndpoint[o.EndpointID] = append(byEndpoint[o.EndpointID], RecordedOpen{At: o.At, Observations: o.Observations, Failures: o.Failures})
		}
	}
	// The log is read endpoint by endpoint, twice: first to measure each
	// endpoint's evidence (and the minutes it had traffic in), from which
	// the class's figures, the derived config, the grid and the quiet time
	// come; then, when that is evidence enough, to cut each endpoint's log
	// into the grid's segments and replay them. Between endpoints the pass
	// keeps only their evidence (with MaxListedIncidents incidents each),
	// the bounds of their incidents, their minutes with traffic (until the
	// quiet time is counted) and the grid's tallies and losses: O(endpoints
	// x grid) beside 16 bytes an incident, whatever the number of
	// attempts.
	var (
		sp  spent
		buf []replay.Row
	)
	used := &passUsed{segments: map[string][]Segment{}}
	red := newReducer(since, until)
	eps := make([]endpointKept, len(ids))
	for i, id := range ids {
		started := time.Now()
		if buf, err = t.readLog(ctx, id, since, until, buf); err != nil {
			return Recommendation{}, nil, err
		}
		used.hold(len(buf))
		read := time.Since(started)
		e := Measure(id, buf, since, until, byEndpoint[id])
		if e.Counted() {
			eps[i] = endpointKept{counted: true, attempts: e.Attempts, incidents: boundsOf(e.Incidents), active: activeMinutes(buf, since, e.Minutes)}
		}
		red.add(e)
		t.pace(ctx, paced, time.Since(started), read, &sp.measure, &sp)
	}
	ev := red.result()
	ranAt := t.deps.Now().UTC()
	cur := ClassConfig(c.Breaker)
	rec := Recommendation{Class: name, Status: StatusKept, Mode: c.AutoTune, Current: &cur, RanAt: &ranAt}
	hist, err := t.history(ctx, c, &rec)
	if err != nil {
		return Recommendation{}, nil, err
	}

	bounds := BoundsOf(c)
	derived := Derive(ev, c.Breaker, bounds)
	configs := Grid(derived, c.Breaker, bounds)
	lead := LeadFor(configs)
	used.configs = configs
	// The class's quiet time is its endpoints' quiet time with traffic,
	// weighted by their attempts: an endpoint of one attempt does not
	// contribute the whole range.
	var quietSum, quietWeight float64
	for i, id := range ids {
		if !eps[i].counted {
			continue
		}
		segments := Segments(since, until, eps[i].incidents.incidents(), lead)
		if keepSegments {
			used.segments[id] = segments
		}
		quietSum += float64(eps[i].attempts) * activeQuiet(since, eps[i].active, segments).Seconds()
		quietWeight += float64(eps[i].attempts)
		eps[i].active = nil
	}
	var quiet time.Duration
	if quietWeight > 0 {
		quiet = time.Duration(quietSum / quietWeight * float64(time.Second)).Round(time.Second)
	}
	view := ev.View(quiet)
	rec.Evidence = &view
	if ok, why := EnoughEvidence(ev, quiet); !ok {
		rec.Reasons = append(why, "the current config is kept")
		used.spent = sp
		return rec, used, t.save(ctx, c, rec)
	}
	// Each endpoint's detections are compared with the current config's
	// incident by incident as its tallies come, and dropped: the pass
	// keeps a loss and a tally per config, not a detection per incident.
	tallies := make([]replay.Tally, len(configs))
	losses := make([]Loss, len(configs))
	ref := slices.Index(configs, c.Breaker)
	for i, id := range ids {
		if !eps[i].counted {
			continue
		}
		started := time.Now()
		if buf, err = t.readLog(ctx, id, since, until, buf); err != nil {
			return Recommendation{}, nil, err
		}
		read := time.Since(started)
		traces := Traces(buf, Segments(since, until, eps[i].incidents.incidents(), lead))
		eps[i].incidents = nil
		used.hold(len(buf) + traceRows(traces))
		if len(traces) > 0 {
			part, err := replay.Score(configs, traces, replay.SweepOptions{Seed: t.cfg.Seed, Workers: 1})
			if err != nil {
				return Recommendation{}, nil, fmt.Errorf("replay endpoint %s: %w", id, err)
			}
			if ref >= 0 {
				for j := range part {
					losses[j].Add(part[ref].ByIncident, part[j].ByIncident)
				}
			}
			for j := range tallies {
				part[j].ByIncident = nil
				tallies[j].Add(part[j])
			}
		}
		t.pace(ctx, paced, time.Since(started), read, &sp.replay, &sp)
	}
	used.spent = sp
	ranked := replay.Ranked(configs, tallies)
	var compared map[breaker.Config]Loss
	if ref >= 0 {
		compared = make(map[breaker.Config]Loss, len(configs))
		for j, l := range losses {
			compared[configs[j]] = l
		}
	}
	d := DecideCompared(c.Breaker, ranked, compared, hist)
	rec.Configs = len(configs)
	rec.Status, rec.Reasons = d.Status, d.Reasons
	if d.Current != nil {
		rec.Figures.Current = NewFigures(*d.Current)
	}
	if d.Proposed != nil {
		p := ClassConfig(*d.Proposed)
		rec.Proposed, rec.Figures.Proposed = &p, NewFigures(*d.Best)
	}
	return rec, used, t.save(ctx, c, rec)
}

// save stores a pass's recommendation. A proposal equivalent to the one
// already shadowing (Equivalent) keeps that shadow running; a new proposal
// is announced (traffic_class.recommended).
func (t *Tuner) save(ctx context.Context, c trafficclass.Class, rec Recommendation) error {
	sr := store.Recommendation{Class: c.Name, Status: string(rec.Status)}
	event := ""
	if rec.Status == StatusProposed {
		if prev, err := t.deps.Store.GetRecommendation(ctx, c.Name); err == nil && prev.Status == string(StatusShadowing) {
			if old, err := decodeRecommendation(prev.Body); err == nil && old.Proposed != nil && *old.Current == *rec.Current &&
				Equivalent(breaker.Config(*old.Proposed), breaker.Config(*rec.Proposed)) {
				if *old.Proposed != *rec.Proposed {
					rec.Reasons = append(rec.Reasons, fmt.Sprintf("the shadow of the equivalent proposal (%s) goes on", describe(breaker.Config(*old.Proposed))))
				}
				rec.Status, rec.Shadow, rec.Proposed = StatusShadowing, old.Shadow, old.Proposed
				sr.Status, sr.ShadowSince, sr.ShadowUntil = prev.Status, prev.ShadowSince, prev.ShadowUntil
			}
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if rec.Status == StatusProposed {
			event = store.OpTrafficClassRecommended
		}
	}
	body, err := encodeRecommendation(rec)
	if err != nil {
		return err
	}
	sr.Body = body
	return t.deps.Store.SaveRecommendation(ctx, sr, event, eventData(rec))
}

// eventData is the data of a traffic_class.* event about rec.
func eventData(rec Recommendation) map[string]any {
	return map[string]any{"status": rec.Status, "current": rec.Current, "proposed": rec.Proposed,
		"figures": rec.Figures, "evidence_since": evidenceBound(rec, true), "evidence_until": evidenceBound(rec, false), "reasons": rec.Reasons}
}

func evidenceBound(rec Recommendation, since bool) any {
	if rec.Evidence == nil {
		return nil
	}
	if since {
		return rec.Evidence.Since
	}
	return rec.Evidence.Until
}

// Get returns class's recommendation: the stored one, or status none.
func Get(ctx context.Context, st Store, class string) (Recommendation, error) {
	c, err := st.GetClass(ctx, class)
	if err != nil {
		return Recommendation{}, err
	}
	r, err := st.GetRecommendation(ctx, class)
	if errors.Is(err, store.ErrNotFound) {
		return None(c), nil
	}
	if err != nil {
		return Recommendation{}, err
	}
	rec, err := decodeRecommendation(r.Body)
	if err != nil {
		return Recommendation{}, err
	}
	rec.Status, rec.Mode = Status(r.Status), c.AutoTune
	return rec, nil
}

// ErrNothingToReject is returned when rejecting a recommendation that
// proposes nothing (kept, applied, rejected or none).
var ErrNothingToReject = fmt.Errorf("%w: the recommendation proposes nothing to reject", store.ErrConflict)

// ErrNothingToApply is returned when applying a recommendation that
// proposes nothing (kept, applied, rejected or none).
var ErrNothingToApply = fmt.Errorf("%w: the recommendation proposes nothing to apply", store.ErrConflict)

// Reject drops class's proposal (proposed or shadowing) as an admin's call.
func Reject(ctx context.Context, st Store, class string) (Recommendation, error) {
	rec, err := Get(ctx, st, class)
	if err != nil {
		return Recommendation{}, err
	}
	if rec.Status != StatusProposed && rec.Status != StatusShadowing {
		return Recommendation{}, ErrNothingToReject
	}
	was := rec.Status
	rec.Status = StatusRejected
	rec.Reasons = append(rec.Reasons, "rejected by an admin")
	rec.remember()
	return rec, saveAs(ctx, st, rec, was, nil)
}

// saveAs stores rec with its shadow's range; with expect set, only over a
// stored recommendation of that status (store.ErrRecommendationChanged
// otherwise).
func saveAs(ctx context.Context, st Store, rec Recommendation, expect Status, data map[string]any) error {
	body, err := encodeRecommendation(rec)
	if err != nil {
		return err
	}
	sr := store.Recommendation{Class: rec.Class, Status: string(rec.Status), Body: body, Expect: string(expect)}
	if rec.Shadow != nil {
		sr.ShadowSince, sr.ShadowUntil = &rec.Shadow.Since, &rec.Shadow.Until
	}
	return st.SaveRecommendation(ctx, sr, "", data)
}

// history reads what the class's past says about this pass's proposals:
// the proposals rejected from the current config (carried into rec, so
// that passes in between do not forget them) and the changes applied
// within the last UndoPasses intervals.
func (t *Tuner) history(ctx context.Context, c trafficclass.Class, rec *Recommendation) (History, error) {
	var h History
	prev, err := t.deps.Store.GetRecommendation(ctx, c.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return h, err
	default:
		old, err := decodeRecommendation(prev.Body)
		if err != nil {
			return h, err
		}
		if prev.Status == string(StatusRejected) {
			old.remember()
		}
		rec.RejectedBefore = old.RejectedBefore
	}
	for _, r := range rec.RejectedBefore {
		if breaker.Config(r.Current) == c.Breaker {
			h.Rejected = append(h.Rejected, breaker.Config(r.Proposed))
		}
	}
	tunings, err := t.deps.Store.ListTunings(ctx, c.Name, UndoPasses)
	if err != nil {
		return h, err
	}
	recent := t.deps.Now().Add(-UndoPasses * t.cfg.Interval)
	for _, tu := range tunings {
		var from, to ClassConfig
		if tu.At.Before(recent) || json.Unmarshal(tu.OldConfig, &from) != nil || json.Unmarshal(tu.NewConfig, &to) != nil {
			continue
		}
		h.Recent = append(h.Recent, Change{From: breaker.Config(from), To: breaker.Config(to)})
	}
	return h, nil
}

// maxRejections is how many rejected proposals a class remembers.
const maxRejections = 20

// remember adds rec's proposal, from its current config, to the proposals
// rejected before.
func (rec *Recommendation) remember() {
	if rec.Proposed == nil || rec.Current == nil {
		return
	}
	r := Rejection{Current: *rec.Current, Proposed: *rec.Proposed}
	if slices.Contains(rec.RejectedBefore, r) {
		return
	}
	rec.RejectedBefore = append(rec.RejectedBefore, r)
	if n := len(rec.RejectedBefore); n > maxRejections {
		rec.RejectedBefore = slices.Clone(rec.RejectedBefore[n-maxRejections:])
	}
}

// storedRecommendation is a recommendation as stored: with the proposals
// rejected before, which the API does not show.
type storedRecommendation struct {
	Recommendation
	RejectedBefore []Rejection `json:"rejected_before,omitempty"`
}

func encodeRecommendation(rec Recommendation) ([]byte, error) {
	body, err := json.Marshal(storedRecommendation{Recommendation: rec, RejectedBefore: rec.RejectedBefore})
	if err != nil {
		return nil, fmt.Errorf("encode recommendation: %w", err)
	}
	return body, nil
}

func decodeRecommendation(body []byte) (Recommendation, error) {
	var s storedRecommendation
	if err := json.Unmarshal(body, &s); err != nil {
		return Recommendation{}, fmt.Errorf("decode recommendation: %w", err)
	}
	rec := s.Recommendation
	rec.RejectedBefore = s.RejectedBefore
	if rec.Evidence != nil {
		rec.Evidence.upgrade()
	}
	return rec, nil
}
