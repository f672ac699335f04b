package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store/storetest"
)

// cli runs the api command line as main would and returns its exit status
// and output.
func cli(t *testing.T, databaseURL string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	env := map[string]string{"DATABASE_URL": databaseURL}
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
	code = exitCode(err, &errOut)
	return code, out.String(), errOut.String()
}

var tokenLine = regexp.MustCompile(`^hkd_[A-Za-z0-9_-]{43}\n$`)

func TestTokenCreateListRevoke(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()

	code, out, errOut := cli(t, db.URL, "token", "create", "--name", "ci")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, tokenLine, out, "the token alone on stdout")
	token := strings.TrimSpace(out)
	require.Regexp(t, `^api: created an admin token "ci" \(tok_[0-9A-Z]{26}\); it is shown only this once\n$`, errOut)

	// Only its hash is stored.
	var stored []byte
	var id string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id, sha256 FROM api_tokens WHERE name = 'ci'`).Scan(&id, &stored))
	sum := sha256.Sum256([]byte(token))
	require.Equal(t, sum[:], stored)
	var texts int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM api_tokens WHERE position($1 in name || id) > 0`, token).Scan(&texts))
	require.Zero(t, texts)

	code, out2, _ := cli(t, db.URL, "token", "create", "--name", "deploy")
	require.Equal(t, 0, code)
	require.NotEqual(t, out, out2)

	code, _, errOut = cli(t, db.URL, "token", "create", "--name", "ci")
	require.Equal(t, 1, code)
	require.Equal(t, "api: create token: conflict: a live token is already named \"ci\"\n", errOut)

	code, out, _ = cli(t, db.URL, "token", "list")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^NAME\s+ID\s+SCOPE\s+TENANT\s+ACCESS\s+CREATED\s+EXPIRES\s+LAST USED\s+REVOKED$`, lines[0])
	require.Regexp(t, `^ci\s+`+id+`\s+admin\s+-\s+read-write\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+-\s+-\s+-$`, lines[1])
	require.Regexp(t, `^deploy\s+tok_`, lines[2])
	require.NotContains(t, out, token)
	require.NotContains(t, out, "hkd_")

	code, out, _ = cli(t, db.URL, "token", "revoke", "--name", "ci")
	require.Equal(t, 0, code)
	require.Equal(t, "revoked token \"ci\" ("+id+"); API processes refuse it within 10s\n", out)
	code, _, errOut = cli(t, db.URL, "token", "revoke", "--name", "ci")
	require.Equal(t, 1, code)
	require.Equal(t, "api: revoke token: no live token named \"ci\"\n", errOut)
	code, _, errOut = cli(t, db.URL, "token", "revoke", "--id", id)
	require.Equal(t, 1, code)
	require.Equal(t, "api: revoke token: no live token with id "+id+"\n", errOut)

	code, out, _ = cli(t, db.URL, "token", "list")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^ci\s+`+id+`\s+admin\s+-\s+read-write\s+\S+\s+-\s+-\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, out, "revoked, with when")

	// The name is free again; revoke by id.
	code, _, _ = cli(t, db.URL, "token", "create", "--name", "ci")
	require.Equal(t, 0, code)
	var newID string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM api_tokens WHERE name = 'ci' AND revoked_at IS NULL`).Scan(&newID))
	code, out, _ = cli(t, db.URL, "token", "revoke", "--id", newID)
	require.Equal(t, 0, code)
	require.Contains(t, out, newID)
}

func TestTokenCommandUsageErrors(t *testing.T) {
	t.Parallel()
	// Nothing listens here: a usage error is reported before connecting.
	const dead = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"token"}, "api: token: want a subcommand: create, list or revoke (api token --help)\n"},
		{[]string{"token", "frobnicate"}, "api: token: unknown subcommand \"frobnicate\": want create, list or revoke\n"},
		{[]string{"token", "create"}, "api: token create: --name is required (or --tenant)\n"},
		{[]string{"token", "create", "--name", ""}, "api: token create: --name is required (or --tenant)\n"},
		{[]string{"token", "create", "--name", "bootstrap"}, "api: token create: --name \"bootstrap\" \"bootstrap\" names the bootstrap API_TOKEN\n"},
		{[]string{"token", "create", "--name", "a b"}, "api: token create: --name \"a b\" must be 1-64 characters of letters, digits and . _ @ -, starting with a letter or digit\n"},
		{[]string{"token", "create", "--nmae", "ci"}, "api: flag provided but not defined: -nmae\n"},
		{[]string{"token", "create", "--name", "ci", "extra"}, "api: token create: unexpected argument \"extra\"\n"},
		{[]string{"token", "list", "--name", "ci"}, "api: flag provided but not defined: -name\n"},
		{[]string{"token", "revoke"}, "api: token revoke: give exactly one of --name and --id\n"},
		{[]string{"token", "revoke", "--name", "ci", "--id", "tok_x"}, "api: token revoke: give exactly one of --name and --id\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, dead, tt.args...)
			require.Equal(t, 2, code)
			require.Equal(t, tt.msg, errOut)
			require.Empty(t, out)
		})
	}
}

func TestTokenCommandHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"token", "--help"}, {"token", "create", "--help"}, {"token", "revoke", "-h"}} {
		code, out, errOut := cli(t, "postgres://127.0.0.1:1/x", args...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "usage: api token create --name NAME")
		require.Contains(t, out, "--database-url")
	}
	code, out, _ := cli(t, "postgres://127.0.0.1:1/x", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "api token create|list|revoke")
}

func TestTokenCommandNeedsACurrentSchema(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	_, err := db.Pool.Exec(context.Background(), `DELETE FROM hookd_migrations WHERE version = (SELECT max(version) FROM hookd_migrations)`)
	require.NoError(t, err)
	code, out, errOut := cli(t, db.URL, "token", "create", "--name", "ci")
	require.Equal(t, 1, code)
	require.Empty(t, out, "no token printed")
	require.Contains(t, errOut, fmt.Sprintf("api: database %q on ", db.Name))
	require.Contains(t, errOut, "has no current hookd schema")

	// A database that never held hookd (the default URL names "postgres"):
	// the same answer, not "relation hookd_migrations does not exist".
	_, err = db.Pool.Exec(context.Background(), `DROP TABLE hookd_migrations`)
	require.NoError(t, err)
	code, out, errOut = cli(t, db.URL, "token", "create", "--name", "ci")
	require.Equal(t, 1, code)
	require.Empty(t, out, "no token printed")
	require.Contains(t, errOut, fmt.Sprintf("api: database %q on ", db.Name))
	require.Contains(t, errOut, "has no current hookd schema")

	code, _, errOut = cli(t, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "token", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "api: ping database: ")
}

// TestTokenCreateScoped: --tenant binds a token to one tenant (named after
// it unless --name says otherwise), --expires sets its expiry by the
// database clock and --read-only marks it so; list shows all three.
func TestTokenCreateScoped(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()

	code, out, errOut := cli(t, db.URL, "token", "create", "--tenant", "acme:eu", "--expires", "720h", "--read-only")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, tokenLine, out)
	require.Regexp(t, `^api: created a tenant "acme:eu" read-only \(expires \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\) token "acme\.eu-[0-9a-f]{8}" \(tok_[0-9A-Z]{26}\); it is shown only this once\n$`, errOut)
	var (
		scope, tenant string
		readOnly      bool
		lifetime      float64
	)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT scope, tenant_id, read_only, extract(epoch FROM expires_at - created_at)
		FROM api_tokens WHERE sha256 = sha256($1::bytea)`, []byte(strings.TrimSpace(out))).Scan(&scope, &tenant, &readOnly, &lifetime))
	require.Equal(t, "tenant", scope)
	require.Equal(t, "acme:eu", tenant)
	require.True(t, readOnly)
	require.InDelta(t, (720 * time.Hour).Seconds(), lifetime, 1)

	code, _, errOut = cli(t, db.URL, "token", "create", "--tenant", "globex", "--name", "globex-app")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, `created a tenant "globex" token "globex-app"`)

	code, out, _ = cli(t, db.URL, "token", "list")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^acme\.eu-[0-9a-f]{8}\s+tok_\S+\s+tenant\s+acme:eu\s+read-only\s+\S+Z\s+\S+Z\s+-\s+-$`, out)
	require.Regexp(t, `(?m)^globex-app\s+tok_\S+\s+tenant\s+globex\s+read-write\s+\S+Z\s+-\s+-\s+-$`, out)
}

func TestTokenCreateScopedUsageErrors(t *testing.T) {
	t.Parallel()
	const dead = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"token", "create", "--tenant", "a b"}, "api: token create: --tenant \"a b\" must be 1-128 characters of letters, digits and . _ : @ -, starting with a letter or digit\n"},
		{[]string{"token", "create", "--name", "ci", "--expires", "soon"}, "api: token create: --expires \"soon\" must be a duration such as 720h or 90m\n"},
		{[]string{"token", "create", "--tenant", "acme", "--expires", "30s"}, "api: token create: --expires \"30s\" must be from 1m0s to 87600h0m0s\n"},
		{[]string{"token", "create", "--read-only"}, "api: token create: --name is required (or --tenant)\n"},
		{[]string{"token", "revoke", "--tenant", "acme"}, "api: flag provided but not defined: -tenant\n"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, dead, tt.args...)
			require.Equal(t, 2, code)
			require.Equal(t, tt.msg, errOut)
			require.Empty(t, out)
		})
	}
}
