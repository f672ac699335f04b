package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
)

func (a *app) recoverCommand() *cobra.Command {
	var since, until string
	var yes bool
	c := &cobra.Command{
		Use:   "recover ENDPOINT_ID --since TIME",
		Short: "Queue an endpoint's failed deliveries since a time again, after a confirmation",
		Long: `recover counts the endpoint's failed deliveries created in the range and
asks for a confirmation (y) on standard input, unless --yes is given; then
the API gives each a new series of attempts, released at a pace once the
endpoint answers.`,
		Example: "  hookd recover ep_01J... --since 2h\n  hookd recover ep_01J... --since 2026-01-02T03:00:00Z --until 2026-01-02T05:00:00Z --yes",
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since == "" {
				return usagef("recover needs --since")
			}
			from, err := parseTime("since", since, a.env.Now())
			if err != nil {
				return err
			}
			to, err := a.optTime("until", until)
			if err != nil {
				return err
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			ctx, id := cmd.Context(), args[0]
			// The count is the failed deliveries the API would queue: the
			// same endpoint and range.
			filter := hookd.DeliveryFilter{EndpointID: &id, Status: hookd.Ptr("failed"), Since: &from, Until: to, Limit: hookd.Ptr(250)}
			n := 0
			for _, err := range client.Deliveries.All(ctx, &filter) {
				if err != nil {
					return err
				}
				n++
			}
			rangeText := "since " + fmtTime(from)
			if to != nil {
				rangeText += " until " + fmtTime(*to)
			}
			fmt.Fprintf(a.env.Stderr, "%d failed deliveries of %s %s.\n", n, id, rangeText)
			if n == 0 {
				return nil
			}
			if !yes {
				fmt.Fprint(a.env.Stderr, "Queue them again? [y/N] ")
				answer, _ := bufio.NewReader(a.env.Stdin).ReadString('\n')
				if !isTerminalReader(a.env.Stdin) {
					fmt.Fprintln(a.env.Stderr) // a terminal echoed the answer's newline
				}
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return errors.New("recover: not confirmed; nothing queued")
				}
			}
			rec, err := client.Endpoints.Recover(ctx, id, hookd.RecoverRequest{Since: from, Until: to})
			if err != nil {
				return err
			}
			return printOne(a.printer(), *rec, []column[hookd.Recovery]{
				{"QUEUED", func(r hookd.Recovery) string { return fmt.Sprint(r.Queued) }},
				{"PAYLOAD EXPIRED", func(r hookd.Recovery) string { return fmt.Sprint(r.PayloadExpired) }},
			})
		},
	}
	c.Flags().StringVar(&since, "since", "", "the start of the range (RFC 3339, or a duration ago such as 2h)")
	c.Flags().StringVar(&until, "until", "", "the end of the range (default: now)")
	c.Flags().BoolVarP(&yes, "yes", "y", false, "queue them without asking")
	return c
}
