package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookd/hookd/internal/store"
)

// maxBatchMessages caps the messages of one batch.
const maxBatchMessages = 100

// minBatchBytes is the least a batch body may hold, whatever the payload
// limit: room for many small messages.
const minBatchBytes = 10 << 20

type batchRequest struct {
	Messages []json.RawMessage `json:"messages"`
}

func (r batchRequest) validate() error {
	var fe fieldErrors
	switch {
	case len(r.Messages) == 0:
		fe.add("messages", fmt.Sprintf("is required: 1 to %d messages", maxBatchMessages))
	case len(r.Messages) > maxBatchMessages:
		fe.add("messages", fmt.Sprintf("must hold at most %d messages", maxBatchMessages))
	}
	return fe.err()
}

type batchResponse struct {
	// Results holds one entry per message, in order: a messageResponse
	// or a Problem.
	Results []any `json:"results"`
}

// inBatch renames the fields of err, one message's, to where they are in
// the batch: payload of the fourth message is messages[3].payload.
func inBatch(i int, err error) error {
	prefix := fmt.Sprintf("messages[%d]", i)
	name := func(field string) string {
		if field == "body" {
			return prefix
		}
		if strings.HasPrefix(field, "/") { // a JSON pointer into the message
			return prefix + field
		}
		return prefix + "." + field
	}
	var ve *ValidationError
	var tl *tooLargeError
	var ot *otherTenantError
	var ue *unprocessableError
	switch {
	case errors.As(err, &ve):
		fields := make([]FieldError, len(ve.Fields))
		for j, f := range ve.Fields {
			fields[j] = FieldError{Field: name(f.Field), Message: f.Message}
		}
		return &ValidationError{Fields: fields}
	case errors.As(err, &tl):
		return &tooLargeError{field: name(tl.field), limit: tl.limit}
	case errors.As(err, &ot):
		return &otherTenantError{field: name(ot.field)}
	case errors.As(err, &ue):
		return &unprocessableError{field: name(ue.field), message: ue.message}
	}
	return err
}

// handleCreateMessages accepts up to maxBatchMessages messages, each as
// POST /v1/messages would, and answers each in order: the message
// accepted, or the problem naming what is wrong with it. The valid ones
// are stored in one transaction with their jobs; an invalid one blocks no
// other. A tenant token's batch naming another tenant is refused whole.
func handleCreateMessages(d Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := max(minBatchBytes, d.MaxPayloadBytes+messageEnvelopeBytes)
		req, err := decode[batchRequest](r, limit)
		if err != nil {
			writeProblem(w, r, d.Logger, err)
			return
		}
		out := batchResponse{Results: make([]any, len(req.Messages))}
		var (
			ins []store.NewMessage
			at  []int // index in the batch of each of ins
		)
		for i, raw := range req.Messages {
			m, err := decodeBytes[createMessageRequest](raw, limit)
			var in store.NewMessage
			if err == nil {
				if err = allowTenant(r, "tenant_id", m.TenantID); err != nil {
					writeProblem(w, r, d.Logger, inBatch(i, err))
					return
				}
				in, err = m.newMessage(d.MaxPayloadBytes)
			}
			if err == nil && d.StrictEventTypes {
				err = d.catalogue.check(r.Context(), in.EventType, in.Payload)
			}
			if err != nil {
				out.Results[i] = problemOf(inBatch(i, err))
				continue
			}
			ins = append(ins, in)
			at = append(at, i)
		}
		if len(ins) > 0 {
			res, err := d.Store.CreateMessages(r.Context(), ins, d.Enqueuer)
			if err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
			for j, c := range res {
				out.Results[at[j]] = toMessage(c.Message, false)
			}
		}
		encode(w, http.StatusOK, out)
	})
}
