package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/store"
)

const tokenSynopsis = `usage: api token create --name NAME          make a token and print it (once)
       api token list                          list tokens (never the tokens themselves)
       api token revoke --name NAME | --id ID  revoke a live token

Only a token's SHA-256 is stored. Requests carry it as "Authorization: Bearer
<token>"; audit records (breaker resets, endpoint enables) name its NAME. A
revoked token is refused by every API process within 10s.`

// tokenStore is what the token commands need of the store.
type tokenStore interface {
	CreateAPIToken(ctx context.Context, name string, sum [32]byte) (store.APIToken, error)
	ListAPITokens(ctx context.Context) ([]store.APIToken, error)
	RevokeAPIToken(ctx context.Context, ref store.TokenRef) (store.APIToken, error)
}

var _ tokenStore = (*store.Store)(nil)

// runToken runs "api token create|list|revoke".
func runToken(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &config.UsageError{Msg: "token: want a subcommand: create, list or revoke (api token --help)"}
	}
	sub, args := args[0], args[1:]
	fs := config.New("api token", tokenSynopsis, getenv, stdout)
	databaseURL := fs.String("database-url", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres connection URL")
	var name, id *string
	switch sub {
	case "-h", "-help", "--help":
		fs.PrintHelp()
		return config.ErrHelp
	case "create":
		name = fs.String("name", "", "", "the token's name: 1-64 letters, digits and . _ @ -, unique among live tokens")
	case "list":
	case "revoke":
		name = fs.String("name", "", "", "revoke the live token of this name")
		id = fs.String("id", "", "", "revoke the token of this id (tok_...)")
	default:
		return &config.UsageError{Msg: fmt.Sprintf("token: unknown subcommand %q: want create, list or revoke", sub)}
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return &config.UsageError{Msg: fmt.Sprintf("token %s: unexpected argument %q", sub, fs.Args()[0])}
	}
	switch sub {
	case "create":
		if *name == "" {
			return &config.UsageError{Msg: "token create: --name is required"}
		}
		if err := api.ValidateTokenName(*name); err != nil {
			return &config.UsageError{Msg: fmt.Sprintf("token create: --name %q %v", *name, err)}
		}
	case "revoke":
		if (*name == "") == (*id == "") {
			return &config.UsageError{Msg: "token revoke: give exactly one of --name and --id"}
		}
	}

	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: *databaseURL, MaxConns: 2, ApplicationName: "hookd-api-token"})
	if err != nil {
		return err
	}
	defer pool.Close()
	current, err := store.MigrationsCurrent(ctx, pool)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		// No hookd_migrations at all: most often the right server but the
		// wrong database (the default names "postgres"; make run uses
		// "hookd" and prints its DATABASE_URL).
		current, err = false, nil
	}
	if err != nil {
		return err
	}
	if !current {
		cc := pool.Config().ConnConfig
		return fmt.Errorf("database %q on %s:%d has no current hookd schema: point --database-url (DATABASE_URL) at hookd's database (make run prints it), or run `api migrate` there first",
			cc.Database, cc.Host, cc.Port)
	}
	st := store.New(pool, nil)
	switch sub {
	case "create":
		return createToken(ctx, st, *name, stdout, stderr)
	case "list":
		return listTokens(ctx, st, stdout)
	default:
		return revokeToken(ctx, st, store.TokenRef{ID: *id, Name: *name}, stdout)
	}
}

// createToken prints the new token alone on stdout (so it can be captured)
// and what it is on stderr.
func createToken(ctx context.Context, st tokenStore, name string, stdout, stderr io.Writer) error {
	token, sum, err := api.NewToken(rand.Reader)
	if err != nil {
		return err
	}
	t, err := st.CreateAPIToken(ctx, name, sum)
	if err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	fmt.Fprintln(stdout, token)
	fmt.Fprintf(stderr, "api: created token %q (%s); it is shown only this once\n", t.Name, t.ID)
	return nil
}

func listTokens(ctx context.Context, st tokenStore, stdout io.Writer) error {
	list, err := st.ListAPITokens(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tCREATED\tLAST USED\tREVOKED")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.ID, stamp(&t.CreatedAt), stamp(t.LastUsedAt), stamp(t.RevokedAt))
	}
	return tw.Flush()
}

func revokeToken(ctx context.Context, st tokenStore, ref store.TokenRef, stdout io.Writer) error {
	t, err := st.RevokeAPIToken(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		what := "named " + fmt.Sprintf("%q", ref.Name)
		if ref.ID != "" {
			what = "with id " + ref.ID
		}
		return fmt.Errorf("revoke token: no live token %s", what)
	}
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	fmt.Fprintf(stdout, "revoked token %q (%s); API processes refuse it within %s\n", t.Name, t.ID, api.TokenCacheTTL)
	return nil
}

// stamp formats an optional time for the list, "-" when unset.
func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
