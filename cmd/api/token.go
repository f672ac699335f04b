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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/store"
)

const tokenSynopsis = `usage: api token create --name NAME [--expires 720h] [--read-only]
                                              make an admin token and print it (once)
       api token create --tenant T [--name NAME] [--expires 720h] [--read-only]
                                              make a token that reaches only tenant T
       api token list                          list tokens (never the tokens themselves)
       api token revoke --name NAME | --id ID  revoke a live token

Only a token's SHA-256 is stored. Requests carry it as "Authorization: Bearer
<token>"; audit records (breaker resets, endpoint enables) name its NAME. A
tenant token sees only its tenant's endpoints, messages and deliveries and
none of the operational routes; a read-only token changes nothing. A revoked
or expired token is refused by every API process within 10s.`

// tokenStore is what the token commands need of the store.
type tokenStore interface {
	CreateAPIToken(ctx context.Context, in store.NewAPIToken) (store.APIToken, error)
	ListAPITokens(ctx context.Context, p store.Page) ([]store.APIToken, error)
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
	// The api's database flags, so the api's environment serves it behind
	// a pooler too; nothing of it needs a session.
	database := config.BindDatabase(fs, "", "the api's migrations (this command needs none)")
	var name, id, tenant, expires *string
	var readOnly *bool
	switch sub {
	case "-h", "-help", "--help":
		fs.PrintHelp()
		return config.ErrHelp
	case "create":
		name = fs.String("name", "", "", "the token's name: 1-64 letters, digits and . _ @ -, unique among live tokens (with --tenant, defaults to one made from the tenant)")
		tenant = fs.String("tenant", "", "", "bind the token to this tenant_id: it reaches nothing else")
		expires = fs.String("expires", "", "", "end the token after this long, e.g. 720h (1m to 87600h); empty: never")
		readOnly = fs.Bool("read-only", "", false, "refuse every change made with the token")
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
	var in store.NewAPIToken
	switch sub {
	case "create":
		if *tenant != "" {
			if err := api.ValidateTenantID(*tenant); err != nil {
				return &config.UsageError{Msg: fmt.Sprintf("token create: --tenant %q %v", *tenant, err)}
			}
			if *name == "" {
				*name = defaultTokenName(*tenant)
			}
		}
		if *name == "" {
			return &config.UsageError{Msg: "token create: --name is required (or --tenant)"}
		}
		if err := api.ValidateTokenName(*name); err != nil {
			return &config.UsageError{Msg: fmt.Sprintf("token create: --name %q %v", *name, err)}
		}
		in = store.NewAPIToken{Scope: store.ScopeAdmin, Name: *name, ReadOnly: *readOnly}
		if *tenant != "" {
			in.Scope, in.TenantID = store.ScopeTenant, *tenant
		}
		if *expires != "" {
			d, err := api.ParseTokenExpiry(*expires)
			if err != nil {
				return &config.UsageError{Msg: fmt.Sprintf("token create: --expires %q %v", *expires, err)}
			}
			in.ExpiresIn = d
		}
	case "revoke":
		if (*name == "") == (*id == "") {
			return &config.UsageError{Msg: "token revoke: give exactly one of --name and --id"}
		}
	}

	if err := database.Check(""); err != nil {
		return err
	}
	pool, err := store.OpenPool(ctx, database.PoolConfig(2, "hookd-api-token"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := requireCurrentSchema(ctx, pool); err != nil {
		return err
	}
	st := store.New(pool, nil)
	switch sub {
	case "create":
		return createToken(ctx, st, in, stdout, stderr)
	case "list":
		return listTokens(ctx, st, stdout)
	default:
		return revokeToken(ctx, st, store.TokenRef{ID: *id, Name: *name}, stdout)
	}
}

// createToken prints the new token alone on stdout (so it can be captured)
// and what it is on stderr.
func createToken(ctx context.Context, st tokenStore, in store.NewAPIToken, stdout, stderr io.Writer) error {
	token, sum, err := api.NewToken(rand.Reader)
	if err != nil {
		return err
	}
	in.Sum = sum
	t, err := st.CreateAPIToken(ctx, in)
	if err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	fmt.Fprintln(stdout, token)
	fmt.Fprintf(stderr, "api: created %s token %q (%s); it is shown only this once\n", describeToken(t), t.Name, t.ID)
	return nil
}

// describeToken says what a token reaches, for the create message.
func describeToken(t store.APIToken) string {
	s := "an admin"
	if t.Scope == store.ScopeTenant {
		s = fmt.Sprintf("a tenant %q", t.TenantID)
	}
	if t.ReadOnly {
		s += " read-only"
	}
	if t.ExpiresAt != nil {
		s += " (expires " + stamp(t.ExpiresAt) + ")"
	}
	return s
}

// defaultTokenName names a tenant token after its tenant: the tenant_id
// with every character a name cannot hold as ".", and a random suffix so
// a tenant can hold several.
func defaultTokenName(tenant string) string {
	b := []byte(tenant)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '@' || c == '-') {
			b[i] = '.'
		}
	}
	if len(b) > 54 {
		b = b[:54]
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix) // never fails (crypto/rand, Go 1.24+)
	return fmt.Sprintf("%s-%x", b, suffix)
}

func listTokens(ctx context.Context, st tokenStore, stdout io.Writer) error {
	list, err := st.ListAPITokens(ctx, store.Page{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSCOPE\tTENANT\tACCESS\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
	for _, t := range list {
		tenant, access := "-", "read-write"
		if t.Scope == store.ScopeTenant {
			tenant = t.TenantID
		}
		if t.ReadOnly {
			access = "read-only"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.ID, t.Scope, tenant, access,
			stamp(&t.CreatedAt), stamp(t.ExpiresAt), stamp(t.LastUsedAt), stamp(t.RevokedAt))
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

// requireCurrentSchema refuses a database without hookd's current schema,
// saying how to find the right one.
func requireCurrentSchema(ctx context.Context, pool *pgxpool.Pool) error {
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
	return nil
}
