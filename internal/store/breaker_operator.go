package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/breaker"
)

// Operator actions on a breaker.
const (
	OperatorReset   = "reset"
	OperatorIsolate = "isolate"
)

// OperateBreaker resets (close now, fresh window) or isolates (held open
// until a reset) an endpoint's breaker at the database's time, recording
// who and why with the transition.
func (s *Store) OperateBreaker(ctx context.Context, endpointID, action string, c breaker.Config, meta TransitionMeta) (breaker.Transition, error) {
	var t breaker.Transition
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var now time.Time
		_, b, err := scanBreaker(tx.QueryRow(ctx, `
			SELECT `+breakerColumns+`, clock_timestamp() FROM breaker_states s
			JOIN endpoints e ON e.id = s.endpoint_id AND e.deleted_at IS NULL
			WHERE s.endpoint_id = $1 FOR UPDATE OF s`, endpointID), &now)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return err
			}
			return fmt.Errorf("lock breaker: %w", err)
		}
		prev := b.Generation
		switch action {
		case OperatorReset:
			t = b.Reset(c, now.UTC())
		case OperatorIsolate:
			t = b.Isolate(c, now.UTC())
		default:
			return fmt.Errorf("breaker action %q: want reset or isolate", action)
		}
		_, err = s.saveBreakerTx(ctx, tx, endpointID, prev, b, &t, withConfig(meta, c))
		return err
	})
	return t, err
}
