package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
)

var tokenColumns = []column[hookd.Token]{
	{"ID", func(t hookd.Token) string { return t.ID }},
	{"NAME", func(t hookd.Token) string { return t.Name }},
	{"SCOPE", func(t hookd.Token) string { return string(t.Scope) }},
	{"TENANT", func(t hookd.Token) string { return fmtStr(t.TenantID) }},
	{"READ ONLY", func(t hookd.Token) string { return fmtBool(t.ReadOnly) }},
	{"EXPIRES", func(t hookd.Token) string { return fmtTimePtr(t.ExpiresAt) }},
	{"LAST USED", func(t hookd.Token) string { return fmtTimePtr(t.LastUsedAt) }},
	{"REVOKED", func(t hookd.Token) string { return fmtTimePtr(t.RevokedAt) }},
}

func (a *app) tokensCommand() *cobra.Command {
	return group("tokens", "List, create and revoke API tokens (admin)", a.tokensList(), a.tokensCreate(), a.tokensRevoke())
}

func (a *app) tokensList() *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:     "list",
		Short:   "List API tokens (never their secrets)",
		Example: "  hookd tokens list",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.Tokens.All(cmd.Context(), nil), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, tokenColumns)
		},
	}
	limitFlag(c, &limit)
	return c
}

func (a *app) tokensCreate() *cobra.Command {
	var name, tenant, expiresIn string
	var readOnly bool
	c := &cobra.Command{
		Use:     "create --name NAME",
		Short:   "Create a token; its secret is shown once",
		Example: "  hookd tokens create --name acme-ci --tenant acme --read-only --expires-in 720h",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usagef("tokens create needs --name")
			}
			req := hookd.CreateTokenRequest{Name: name, TenantID: optString(tenant), ExpiresIn: optString(expiresIn)}
			if readOnly {
				req.ReadOnly = &readOnly
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			t, err := client.Tokens.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			p := a.printer()
			if p.json {
				return p.writeJSON(t)
			}
			// The secret is the one thing to copy: alone on stdout, the
			// token's description on stderr.
			fmt.Fprintf(a.env.Stderr, "Created token %s (%s, %s); its secret is shown once:\n", t.ID, t.Name, t.Scope)
			_, err = fmt.Fprintln(p.out, t.Token)
			return err
		},
	}
	c.Flags().StringVar(&name, "name", "", "the token's name (unique among live tokens)")
	c.Flags().StringVar(&tenant, "tenant", "", "a tenant token: the token reaches this tenant's objects alone")
	c.Flags().BoolVar(&readOnly, "read-only", false, "the token changes nothing")
	c.Flags().StringVar(&expiresIn, "expires-in", "", "how long the token lives, such as 720h (default: forever)")
	return c
}

func (a *app) tokensRevoke() *cobra.Command {
	return &cobra.Command{
		Use:     "revoke TOKEN_ID",
		Short:   "Revoke a token",
		Example: "  hookd tokens revoke tok_01J...",
		Args:    exactArgs(1, "TOKEN_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			if err := client.Tokens.Revoke(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "Revoked %s.\n", args[0])
			return nil
		},
	}
}
