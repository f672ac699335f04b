package hookd

import (
	"context"
	"iter"

	"github.com/hookd/hookd/sdk/go/api"
)

// The delivery types.
type (
	// Delivery is one message's delivery to one endpoint.
	Delivery = api.Delivery
	// DeliveryFilter narrows Deliveries.All; its After is set by the
	// iterator.
	DeliveryFilter = api.SearchDeliveriesParams
	// DeliveryAttemptFilter narrows Deliveries.Attempts.
	DeliveryAttemptFilter = api.ListDeliveryAttemptsParams
)

// DeliveriesService finds deliveries, reads their attempts and retries
// them.
type DeliveriesService struct{ c *Client }

// Get reads a delivery.
func (s *DeliveriesService) Get(ctx context.Context, id string) (*Delivery, error) {
	r, err := s.c.raw.GetDeliveryWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// Retry queues a failed or expired delivery again, for a new series of
// attempts.
func (s *DeliveriesService) Retry(ctx context.Context, id string) (*Delivery, error) {
	r, err := s.c.raw.RetryDeliveryWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON202, r.HTTPResponse, r.Body)
}

// Skip lets a FIFO endpoint's queue stopped at a delivery that used up
// its retries (on_exhausted block) go on; the delivery stays failed. Any
// other delivery answers a 409 *Error.
func (s *DeliveriesService) Skip(ctx context.Context, id string) (*Delivery, error) {
	r, err := s.c.raw.SkipDeliveryWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return result(r.JSON200, r.HTTPResponse, r.Body)
}

// All iterates over the deliveries filter selects, newest first (filter
// may be nil).
func (s *DeliveriesService) All(ctx context.Context, filter *DeliveryFilter) iter.Seq2[Delivery, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[Delivery], error) {
		params.After = after
		r, err := s.c.raw.SearchDeliveriesWithResponse(ctx, &params)
		if err != nil {
			return page[Delivery]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[Delivery]{}, err
		}
		return page[Delivery]{items: list.Data, next: list.NextCursor}, nil
	})
}

// Attempts iterates over the delivery's attempts, newest first.
func (s *DeliveriesService) Attempts(ctx context.Context, id string, filter *DeliveryAttemptFilter) iter.Seq2[Attempt, error] {
	params := copyOf(filter)
	return pages(ctx, func(ctx context.Context, after *string) (page[Attempt], error) {
		params.After = after
		r, err := s.c.raw.ListDeliveryAttemptsWithResponse(ctx, id, &params)
		if err != nil {
			return page[Attempt]{}, err
		}
		list, err := result(r.JSON200, r.HTTPResponse, r.Body)
		if err != nil {
			return page[Attempt]{}, err
		}
		return page[Attempt]{items: list.Data, next: list.NextCursor}, nil
	})
}
