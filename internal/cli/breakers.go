package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

var breakerColumns = []column[hookd.Breaker]{
	{"ENDPOINT", func(b hookd.Breaker) string { return b.EndpointID }},
	{"TENANT", func(b hookd.Breaker) string { return b.TenantID }},
	{"STATE", func(b hookd.Breaker) string { return string(b.State) }},
	{"OPEN UNTIL", func(b hookd.Breaker) string { return fmtTimePtr(b.OpenUntil) }},
	{"FAILURE RATE", func(b hookd.Breaker) string { return strconv.FormatFloat(float64(b.FailureRate), 'f', 2, 32) }},
	{"CONSECUTIVE", func(b hookd.Breaker) string { return strconv.Itoa(b.ConsecutiveFailures) }},
	{"TRIPPED BY", func(b hookd.Breaker) string {
		if b.Tripped == nil {
			return ""
		}
		return b.Tripped.Reason
	}},
	{"CLASS", func(b hookd.Breaker) string { return b.TrafficClass }},
}

func (a *app) breakersCommand() *cobra.Command {
	return group("breakers", "Read and operate the endpoints' circuit breakers",
		a.breakersList(), a.breakersGet(),
		a.breakerAction("reset", "Close an endpoint's breaker (an isolated one too) so its deliveries flow again"),
		a.breakerAction("isolate", "Hold an endpoint's breaker open until a reset"))
}

func (a *app) breakersList() *cobra.Command {
	var state, tenant string
	var limit int
	c := &cobra.Command{
		Use:     "list",
		Short:   "List breakers",
		Example: "  hookd breakers list --state open",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := hookd.BreakerFilter{TenantID: optString(tenant)}
			if state != "" {
				s := api.BreakerState(state)
				if !s.Valid() {
					return usagef("--state is closed, open, half_open or isolated, not %q", state)
				}
				f.State = &s
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.Breakers.All(cmd.Context(), &f), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, breakerColumns)
		},
	}
	c.Flags().StringVar(&state, "state", "", "only breakers in this state (closed, open, half_open, isolated)")
	c.Flags().StringVar(&tenant, "tenant", "", "only this tenant's breakers")
	_ = c.RegisterFlagCompletionFunc("state", cobra.FixedCompletions([]string{"closed", "open", "half_open", "isolated"}, cobra.ShellCompDirectiveNoFileComp))
	limitFlag(c, &limit)
	return c
}

func (a *app) breakersGet() *cobra.Command {
	return &cobra.Command{
		Use:     "get ENDPOINT_ID",
		Short:   "Show an endpoint's breaker with its recent transitions",
		Example: "  hookd breakers get ep_01J...",
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			b, err := client.Breakers.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(a.printer(), *b, breakerColumns)
		},
	}
}

func (a *app) breakerAction(name, short string) *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use:     name + " ENDPOINT_ID",
		Short:   short,
		Example: fmt.Sprintf("  hookd breakers %s ep_01J... --reason 'receiver fixed'", name),
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			var b *hookd.Breaker
			if name == "reset" {
				b, err = client.Breakers.Reset(cmd.Context(), args[0], reason)
			} else {
				b, err = client.Breakers.Isolate(cmd.Context(), args[0], reason)
			}
			if err != nil {
				return err
			}
			return printOne(a.printer(), *b, breakerColumns)
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why, recorded with the transition")
	return c
}
