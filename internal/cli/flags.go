package cli

import (
	"iter"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// collect reads up to limit items of a paged list (every item when limit
// is 0 or less).
func collect[T any](seq iter.Seq2[T, error], limit int) ([]T, error) {
	var out []T
	for item, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, item)
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out, nil
}

// parseTime reads a time flag: RFC 3339, or a duration meaning that long
// before now ("90m", "2h").
func parseTime(flag, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(strings.TrimPrefix(s, "-"))
	if err != nil || d < 0 {
		return time.Time{}, usagef("--%s %q is neither an RFC 3339 time nor a duration such as 2h", flag, s)
	}
	return now.Add(-d), nil
}

// optTime parses an optional time flag: nil when empty.
func (a *app) optTime(flag, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	t, err := parseTime(flag, s, a.env.Now())
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// optString is nil for an empty flag: the API's optional fields.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// limitFlag adds --limit, the most items a list prints.
func limitFlag(c *cobra.Command, limit *int) {
	c.Flags().IntVar(limit, "limit", 100, "the most items to print (0: all)")
}
