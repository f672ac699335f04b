package tuning

import (
	"fmt"
	"slices"
	"time"
)

// DetectTolerance is how much slower than the live breaker a shadow may
// open on an incident and still count as no slower: the live breaker
// decides on its flush against the database clock, the shadow at each
// logged attempt's end.
const DetectTolerance = time.Second

// openAt is an open of an endpoint's breaker at a time.
type openAt struct {
	endpoint string
	at       time.Time
}

// liveFigures counts opens against the incidents found in the shadow's
// range: opens outside every incident (from IncidentBucket before its
// start to IncidentTail after its end) are quiet-time opens; each
// incident's first open inside that span detects it. It returns the
// figures and each incident's detection (nil when undetected), in the
// order of the endpoints' incidents.
func liveFigures(opens []openAt, incidents map[string][]Incident, endpoints []string) (LiveFigures, []*time.Duration) {
	var f LiveFigures
	span := func(in Incident) Interval {
		return Interval{From: in.From.Add(-IncidentBucket), To: in.To.Add(IncidentTail)}
	}
	for _, o := range opens {
		if !slices.ContainsFunc(incidents[o.endpoint], func(in Incident) bool { return span(in).Contains(o.at) }) {
			f.OpensQuiet++
		}
	}
	var detections []*time.Duration
	var detected []time.Duration
	for _, ep := range endpoints {
		for _, in := range incidents[ep] {
			f.Incidents++
			var d *time.Duration
			for _, o := range opens {
				if o.endpoint == ep && span(in).Contains(o.at) {
					x := max(o.at.Sub(in.From), 0)
					d = &x
					break
				}
			}
			if d != nil {
				detected = append(detected, *d)
			}
			detections = append(detections, d)
		}
	}
	f.IncidentsDetected = len(detected)
	if len(detected) > 0 {
		slices.Sort(detected)
		m, x := round(detected[(len(detected)-1)/2].Seconds(), 3), round(detected[len(detected)-1].Seconds(), 3)
		f.DetectSMedian, f.DetectSMax = &m, &x
	}
	return f, detections
}

// JudgeShadow compares a proposal's shadow opens with the live breakers'
// opens over the same range, against the incidents found in the log of
// that range (by endpoint). The proposal agrees with its replay when it
// made no more quiet-time opens than the live config and detected every
// incident the live config detected no slower (within DetectTolerance).
// Opens must be in time order.
func JudgeShadow(endpoints []string, incidents map[string][]Incident, shadow, live []ShadowOpen) (liveF, proposedF LiveFigures, ok bool, reasons []string) {
	conv := func(in []ShadowOpen) []openAt {
		out := make([]openAt, len(in))
		for i, o := range in {
			out[i] = openAt{endpoint: o.EndpointID, at: o.At}
		}
		return out
	}
	liveF, liveD := liveFigures(conv(live), incidents, endpoints)
	proposedF, propD := liveFigures(conv(shadow), incidents, endpoints)
	ok = true
	if proposedF.OpensQuiet > liveF.OpensQuiet {
		ok = false
		reasons = append(reasons, fmt.Sprintf("the shadow opened %d times on quiet traffic, more than the live config's %d", proposedF.OpensQuiet, liveF.OpensQuiet))
	}
	slower := 0
	for i := range liveD {
		if liveD[i] == nil {
			continue
		}
		if propD[i] == nil || *propD[i] > *liveD[i]+DetectTolerance {
			slower++
		}
	}
	if slower > 0 {
		ok = false
		reasons = append(reasons, fmt.Sprintf("the shadow detected %d of the incidents seen live later than the live config, or not at all", slower))
	}
	if ok {
		reasons = append(reasons, fmt.Sprintf("the shadow agrees with the replay: %d quiet-time opens against the live config's %d, and no incident detected later",
			proposedF.OpensQuiet, liveF.OpensQuiet))
	}
	return liveF, proposedF, ok, reasons
}
