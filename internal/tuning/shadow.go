package tuning

import (
	"fmt"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/replay"
)

// DetectTolerance is how much slower than the live breaker a shadow may
// open on an incident and still count as no slower: the live breaker
// decides on its flush against the database clock, the shadow at each
// logged attempt's end.
const DetectTolerance = time.Second

// liveTally counts one config's opens against the incidents found in the
// shadow's range, endpoint by endpoint: opens outside every incident (from
// IncidentBucket before its start to IncidentTail after its end) are
// quiet-time opens; each incident's first open inside that span detects
// it.
type liveTally struct {
	f        LiveFigures
	detected replay.Durations
}

// add counts an endpoint's opens (in time order) against its incidents,
// and returns each incident's detection (Undetected when none).
func (l *liveTally) add(incidents []Incident, opens []time.Time) []time.Duration {
	span := func(in Incident) Interval {
		return Interval{From: in.From.Add(-IncidentBucket), To: in.To.Add(IncidentTail)}
	}
	for _, at := range opens {
		if !slices.ContainsFunc(incidents, func(in Incident) bool { return span(in).Contains(at) }) {
			l.f.OpensQuiet++
		}
	}
	out := make([]time.Duration, len(incidents))
	for i, in := range incidents {
		l.f.Incidents++
		out[i] = replay.Undetected
		for _, at := range opens {
			if span(in).Contains(at) {
				out[i] = max(at.Sub(in.From), 0)
				l.detected.Add(out[i])
				break
			}
		}
	}
	return out
}

// figures returns the config's live figures.
func (l *liveTally) figures() LiveFigures {
	f := l.f
	f.IncidentsDetected = l.detected.Len()
	if f.IncidentsDetected > 0 {
		m, x := round(l.detected.Median().Seconds(), 3), round(l.detected.Max().Seconds(), 3)
		f.DetectSMedian, f.DetectSMax = &m, &x
	}
	return f
}

// shadowJudge judges a shadow endpoint by endpoint, keeping only counts
// (and the detection times' median): a judge reads one endpoint's log at
// a time and holds its incidents only while it counts them.
type shadowJudge struct {
	live, proposed liveTally
	// slower is how many incidents the live config detected that the
	// shadow detected more than DetectTolerance later, or not at all.
	slower int
}

// add judges one endpoint: its incidents in the shadow's range and the
// opens of the shadow and of the live breaker, each in time order.
func (j *shadowJudge) add(incidents []Incident, shadow, live []time.Time) {
	liveD := j.live.add(incidents, live)
	propD := j.proposed.add(incidents, shadow)
	for i := range liveD {
		if liveD[i] == replay.Undetected {
			continue
		}
		if propD[i] == replay.Undetected || propD[i] > liveD[i]+DetectTolerance {
			j.slower++
		}
	}
}

// result returns both configs' live figures and whether the proposal
// agrees with its replay, with the reasons.
func (j *shadowJudge) result() (liveF, proposedF LiveFigures, ok bool, reasons []string) {
	liveF, proposedF = j.live.figures(), j.proposed.figures()
	ok = true
	if proposedF.OpensQuiet > liveF.OpensQuiet {
		ok = false
		reasons = append(reasons, fmt.Sprintf("the shadow opened %d times on quiet traffic, more than the live config's %d", proposedF.OpensQuiet, liveF.OpensQuiet))
	}
	if j.slower > 0 {
		ok = false
		reasons = append(reasons, fmt.Sprintf("the shadow detected %d of the incidents seen live later than the live config, or not at all", j.slower))
	}
	if ok {
		reasons = append(reasons, fmt.Sprintf("the shadow agrees with the replay: %d quiet-time opens against the live config's %d, and no incident detected later",
			proposedF.OpensQuiet, liveF.OpensQuiet))
	}
	return liveF, proposedF, ok, reasons
}

// opensBy returns the times of opens (in time order) by endpoint.
func opensBy(opens []ShadowOpen) map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, o := range opens {
		out[o.EndpointID] = append(out[o.EndpointID], o.At)
	}
	return out
}

// JudgeShadow compares a proposal's shadow opens with the live breakers'
// opens over the same range, against the incidents found in the log of
// that range (by endpoint). The proposal agrees with its replay when it
// made no more quiet-time opens than the live config and detected every
// incident the live config detected no slower (within DetectTolerance).
// Opens must be in time order; an open of an endpoint not in endpoints is
// a quiet-time open.
func JudgeShadow(endpoints []string, incidents map[string][]Incident, shadow, live []ShadowOpen) (liveF, proposedF LiveFigures, ok bool, reasons []string) {
	j, _ := judgeEndpoints(endpoints, shadow, live, func(id string) ([]Incident, error) { return incidents[id], nil })
	return j.result()
}

// judgeEndpoints judges a shadow as JudgeShadow does, endpoint by
// endpoint, asking incidentsOf for each endpoint's incidents in turn: it
// holds one endpoint's incidents at a time.
func judgeEndpoints(endpoints []string, shadow, live []ShadowOpen, incidentsOf func(id string) ([]Incident, error)) (*shadowJudge, error) {
	var j shadowJudge
	shadowBy, liveBy := opensBy(shadow), opensBy(live)
	for _, id := range endpoints {
		incidents, err := incidentsOf(id)
		if err != nil {
			return nil, err
		}
		j.add(incidents, shadowBy[id], liveBy[id])
		delete(shadowBy, id)
		delete(liveBy, id)
	}
	for _, at := range shadowBy {
		j.proposed.add(nil, at)
	}
	for _, at := range liveBy {
		j.live.add(nil, at)
	}
	return &j, nil
}
