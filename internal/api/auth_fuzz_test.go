package api

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzAuthorizationHeader drives an Authorization header through the
// bearer parse and TokenAuth (bootstrap token only): it never panics, and
// a header is accepted only when it is the Bearer scheme and the exact
// bootstrap token, nothing more, nothing less.
func FuzzAuthorizationHeader(f *testing.F) {
	const boot = "boot-token-7f3a"
	for _, s := range []string{"Bearer " + boot, "bearer " + boot, "Bearer   " + boot + " ", "Basic " + boot, "Bearer",
		"Bearer ", "", boot, "Bearer " + boot + "x", "Bearer " + boot[:len(boot)-1], "Bearer " + boot + " " + boot,
		"Bearer\t" + boot, "Bearer hkd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		f.Add(s)
	}
	a := NewTokenAuth(boot, nil, nil)
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("GET", "/v1/endpoints", nil)
		r.Header.Set("Authorization", header)
		p, err := Principal{}, ErrBadToken
		if token, ok := bearer(r); ok {
			p, err = a.Check(context.Background(), token)
		}
		if err != nil {
			require.ErrorIs(t, err, ErrBadToken)
			require.Empty(t, p)
			return
		}
		require.Equal(t, adminPrincipal(BootstrapTokenName, BootstrapTokenName), p)
		fields := strings.Fields(header)
		require.Len(t, fields, 2, "%q", header)
		require.True(t, strings.EqualFold(fields[0], "Bearer"), "%q", header)
		require.Equal(t, boot, fields[1], "%q", header)
	})
}
