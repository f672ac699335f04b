package hookd

import (
	"context"
	"iter"
)

// page is one page of a list: its items and the cursor of the next page,
// nil on the last.
type page[T any] struct {
	items []T
	next  *string
}

// pages iterates over every item of a keyset-paginated list: fetch reads
// the page after a cursor (nil for the first page). An error ends the
// iteration after it is yielded; so does the caller's break.
func pages[T any](ctx context.Context, fetch func(ctx context.Context, after *string) (page[T], error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var after *string
		for {
			p, err := fetch(ctx, after)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, item := range p.items {
				if !yield(item, nil) {
					return
				}
			}
			if p.next == nil || *p.next == "" || len(p.items) == 0 {
				return
			}
			after = p.next
		}
	}
}
