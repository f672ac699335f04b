package replay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hookd/hookd/internal/breaker"
	"github.com/hookd/hookd/internal/store"
)

// attemptPage is how many attempts LoadAttempts reads per query.
const attemptPage = 10_000

// LoadAttempts returns the delivery log of one endpoint from since
// (inclusive) to until (exclusive) as rows in time order: each attempt is a
// request at its attempted_at with its classification as the outcome.
// Attempts classified blocked never reached the endpoint and are skipped.
// Equal times keep the order the attempts were logged in.
func LoadAttempts(ctx context.Context, st *store.Store, endpointID string, since, until time.Time) ([]Row, error) {
	type logged struct {
		id  int64
		row Row
	}
	var (
		all   []logged
		after store.AttemptKey
	)
	for {
		page, err := st.ListAttempts(ctx, store.AttemptFilter{
			EndpointID: endpointID, Since: &since, Until: &until, After: after, Limit: attemptPage,
		})
		if err != nil {
			return nil, fmt.Errorf("load attempts: %w", err)
		}
		for _, a := range page {
			if a.Classification == "blocked" {
				continue
			}
			o, err := breaker.ParseOutcome(a.Classification)
			if err != nil {
				return nil, fmt.Errorf("load attempts: attempt %d: %w", a.ID, err)
			}
			all = append(all, logged{id: a.ID, row: Row{TS: time.Duration(a.AttemptedAt.UnixNano()), Outcome: o}})
		}
		if len(page) < attemptPage {
			break
		}
		last := page[len(page)-1]
		after = store.AttemptKey{At: last.AttemptedAt, ID: last.ID}
	}
	slices.SortFunc(all, func(a, b logged) int {
		if c := cmp.Compare(a.row.TS, b.row.TS); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	rows := make([]Row, len(all))
	for i, l := range all {
		rows[i] = l.row
	}
	return rows, nil
}
