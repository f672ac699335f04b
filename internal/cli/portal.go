package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
)

var portalColumns = []column[hookd.PortalSessionSummary]{
	{"ID", func(s hookd.PortalSessionSummary) string { return s.ID }},
	{"TENANT", func(s hookd.PortalSessionSummary) string { return s.TenantID }},
	{"STATUS", func(s hookd.PortalSessionSummary) string { return string(s.Status) }},
	{"READ ONLY", func(s hookd.PortalSessionSummary) string { return fmtBool(s.ReadOnly) }},
	{"CREATED BY", func(s hookd.PortalSessionSummary) string { return s.CreatedBy }},
	{"EXPIRES", func(s hookd.PortalSessionSummary) string { return fmtTime(s.ExpiresAt) }},
}

func (a *app) portalSessionCommand() *cobra.Command {
	return group("portal-session", "Open, list and end tenant portal sessions (admin)",
		a.portalCreate(), a.portalList(), a.portalEnd())
}

func (a *app) portalCreate() *cobra.Command {
	var expiresIn string
	var readOnly bool
	c := &cobra.Command{
		Use:     "create TENANT",
		Short:   "Open a portal session for a tenant; its URL opens once",
		Example: "  hookd portal-session create acme --read-only --expires-in 1h",
		Args:    exactArgs(1, "TENANT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := hookd.CreatePortalSessionRequest{ExpiresIn: optString(expiresIn)}
			if readOnly {
				req.ReadOnly = &readOnly
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			s, err := client.PortalSessions.Create(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			p := a.printer()
			if p.json {
				return p.writeJSON(s)
			}
			fmt.Fprintf(a.env.Stderr, "Opened portal session %s for %s until %s; its URL opens once:\n", s.ID, s.TenantID, fmtTime(s.ExpiresAt))
			_, err = fmt.Fprintln(p.out, s.URL)
			return err
		},
	}
	c.Flags().StringVar(&expiresIn, "expires-in", "", "how long the session lives, such as 1h")
	c.Flags().BoolVar(&readOnly, "read-only", false, "the session changes nothing")
	return c
}

func (a *app) portalList() *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:     "list TENANT",
		Short:   "List a tenant's portal sessions, newest first",
		Example: "  hookd portal-session list acme",
		Args:    exactArgs(1, "TENANT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.PortalSessions.All(cmd.Context(), args[0], nil), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, portalColumns)
		},
	}
	limitFlag(c, &limit)
	return c
}

func (a *app) portalEnd() *cobra.Command {
	return &cobra.Command{
		Use:     "end SESSION_ID",
		Short:   "End a portal session at once",
		Example: "  hookd portal-session end ps_01J...",
		Args:    exactArgs(1, "SESSION_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			if err := client.PortalSessions.End(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "Ended %s.\n", args[0])
			return nil
		},
	}
}
