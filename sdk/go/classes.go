package hookd

import (
	"context"

	"github.com/hookd/hookd/sdk/go/api"
)

// The traffic class types.
type (
	// TrafficClass is a traffic class's breaker and tuning settings.
	TrafficClass = api.TrafficClassConfig
	// ClassRecommendation is the automatic tuner's latest proposal for a
	// class, with its evidence.
	ClassRecommendation = api.ClassRecommendation
	// TuneRequest bounds the window of history a tuning pass reads.
	TuneRequest = api.TuneRequest
	// ClassTuneStatus is where a queued tuning pass stands.
	ClassTuneStatus = api.ClassTuneStatus
)

// TrafficClassesService reads traffic classes and acts on the tuner's
// recommendations (admin tokens only).
type TrafficClassesService struct{ c *Client }

// List reads every traffic class (the list is short and not paged).
func (s *TrafficClassesService) List(ctx context.Context) ([]TrafficClass, error) {
	r, err := s.c.raw.ListTrafficClassesWithResponse(ctx)
	if err != nil {
		return nil, err
	}
	list, err := result(r.JSON200, r.HTTPResponse, r.Body)
	if err != nil {
		return nil, err
	}
	return list.Data, nil
}

// Get reads one traffic class.
func (s *TrafficClassesService) Get(ctx context.Context, name string) (*TrafficClass, error) {
	r, err := s.c.raw.GetTrafficClassWithResponse(ctx, name)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Recommendation reads the class's latest tuning recommendation.
func (s *TrafficClassesService) Recommendation(ctx context.Context, name string) (*ClassRecommendation, error) {
	r, err := s.c.raw.GetClassRecommendationWithResponse(ctx, name)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Tune queues a tuning pass of the class over req's window for the fleet's
// tuning leader; TuneStatus follows it, and Recommendation reads its
// result once it is done.
func (s *TrafficClassesService) Tune(ctx context.Context, name string, req TuneRequest) (*ClassTuneStatus, error) {
	r, err := s.c.raw.TuneClassWithResponse(ctx, name, req)
	if err != nil {
		return nil, err
	}
	return result(r.JSON202, r.HTTPResponse, r.Body)
}

// TuneStatus reads where the class's latest queued tuning pass stands.
func (s *TrafficClassesService) TuneStatus(ctx context.Context, name string) (*ClassTuneStatus, error) {
	r, err := s.c.raw.GetClassTuneWithResponse(ctx, name)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Apply applies the class's proposed settings.
func (s *TrafficClassesService) Apply(ctx context.Context, name string) (*ClassRecommendation, error) {
	r, err := s.c.raw.ApplyClassRecommendationWithResponse(ctx, name)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Reject rejects the class's proposal; the class keeps its settings.
func (s *TrafficClassesService) Reject(ctx context.Context, name string) (*ClassRecommendation, error) {
	r, err := s.c.raw.RejectClassRecommendationWithResponse(ctx, name)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}
