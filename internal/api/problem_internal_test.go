package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestIsUnavailable: every way a Postgres restart shows up in a request is
// a 503, not a 500. A connection the server closed failed its next use
// with "conn closed", which the chaos test saw answered 500.
func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"conn closed", fmt.Errorf("insert message: %w", pgconn.ErrConnClosed), true},
		{"unexpected EOF", fmt.Errorf("insert message: %w", io.ErrUnexpectedEOF), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"cannot connect now", fmt.Errorf("x: %w", &pgconn.PgError{Code: "57P03"}), true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"not found", store.ErrNotFound, false},
		{"canceled", context.Canceled, false},
		{"other", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, isUnavailable(tt.err))
		})
	}
}
