package api

import (
	"fmt"
	"net/http"
)

// maxBulkRetry caps the ids of one bulk retry.
const maxBulkRetry = 1000

type retryDeliveriesRequest struct {
	IDs []string `json:"ids"`
}

func (r retryDeliveriesRequest) validate() error {
	var fe fieldErrors
	switch {
	case len(r.IDs) == 0:
		fe.add("ids", fmt.Sprintf("is required: 1 to %d delivery ids", maxBulkRetry))
	case len(r.IDs) > maxBulkRetry:
		fe.add("ids", fmt.Sprintf("must hold at most %d ids", maxBulkRetry))
	}
	for i, id := range r.IDs {
		if !storable(id) {
			fe.add(fmt.Sprintf("ids[%d]", i), "must be UTF-8 text without NUL characters")
		}
	}
	return fe.err()
}

// refusedRetry is one id of a bulk retry that was not queued, with the
// problem POST /v1/deliveries/{id}/retry answers for it.
type refusedRetry struct {
	ID      string  `json:"id"`
	Problem Problem `json:"problem"`
}

type retryDeliveriesResponse struct {
	Queued  []string       `json:"queued"`
	Refused []refusedRetry `json:"refused"`
}

// handleRetryDeliveries re-queues failed deliveries by id, each as
// POST /v1/deliveries/{id}/retry would, in one transaction; an id that
// cannot be retried is refused alone. A tenant token's request reaches
// its tenant's deliveries only: another's is refused as not found.
func handleRetryDeliveries(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[retryDeliveriesRequest](r, maxRequestBytes)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		res, err := d.Store.RetryDeliveries(r.Context(), req.IDs, requestTenants(r), d.Enqueuer)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		out := retryDeliveriesResponse{Queued: []string{}, Refused: []refusedRetry{}}
		seen := make(map[string]bool, len(req.IDs))
		for i, err := range res {
			// An id given twice is answered once.
			if seen[req.IDs[i]] {
				continue
			}
			seen[req.IDs[i]] = true
			if err == nil {
				out.Queued = append(out.Queued, req.IDs[i])
				continue
			}
			out.Refused = append(out.Refused, refusedRetry{ID: req.IDs[i], Problem: problemOf(err)})
		}
		encode(w, http.StatusAccepted, out)
	})
}
