package cli

import (
	"strconv"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
)

var deliveryColumns = []column[hookd.Delivery]{
	{"ID", func(d hookd.Delivery) string { return d.ID }},
	{"STATUS", func(d hookd.Delivery) string { return string(d.Status) }},
	{"ENDPOINT", func(d hookd.Delivery) string { return d.EndpointID }},
	{"MESSAGE", func(d hookd.Delivery) string { return d.MessageID }},
	{"ATTEMPTS", func(d hookd.Delivery) string { return strconv.Itoa(d.AttemptCount) }},
	{"LAST CODE", func(d hookd.Delivery) string { return fmtInt(d.LastStatusCode) }},
	{"LAST ERROR", func(d hookd.Delivery) string { return fmtStr(d.LastError) }},
	{"UPDATED", func(d hookd.Delivery) string { return fmtTime(d.UpdatedAt) }},
}

var attemptColumns = []column[hookd.Attempt]{
	{"#", func(t hookd.Attempt) string { return strconv.Itoa(t.AttemptNumber) }},
	{"AT", func(t hookd.Attempt) string { return fmtTime(t.AttemptedAt) }},
	{"OUTCOME", func(t hookd.Attempt) string { return string(t.Classification) }},
	{"CODE", func(t hookd.Attempt) string { return fmtInt(t.StatusCode) }},
	{"ERROR", func(t hookd.Attempt) string { return fmtStr(t.ErrorClass) }},
	{"MS", func(t hookd.Attempt) string { return strconv.FormatFloat(float64(t.DurationMs), 'f', 0, 32) }},
	{"RESPONSE", func(t hookd.Attempt) string { return t.ResponseExcerpt }},
}

func (a *app) deliveriesCommand() *cobra.Command {
	return group("deliveries", "Find deliveries, read their attempts, retry or skip them",
		a.deliveriesList(), a.deliveriesGet(),
		a.deliveryAction("retry", "Queue a failed or expired delivery again, for a new series of attempts"),
		a.deliveryAction("skip", "Let a FIFO endpoint's queue stopped at an exhausted delivery go on"),
		a.deliveriesAttempts())
}

// deliveryFilter are the flags that narrow a delivery search: list's and
// tail's.
type deliveryFilter struct {
	status, endpoint, tenant, message, since, until string
}

func (f *deliveryFilter) add(c *cobra.Command, withTimes bool) {
	c.Flags().StringVar(&f.status, "status", "", "only deliveries in these statuses, comma-separated (pending, delivering, delivered, failed, waiting, held, expired)")
	c.Flags().StringVar(&f.endpoint, "endpoint", "", "only deliveries to this endpoint")
	c.Flags().StringVar(&f.tenant, "tenant", "", "only this tenant's deliveries")
	c.Flags().StringVar(&f.message, "message", "", "only deliveries of this message")
	if withTimes {
		c.Flags().StringVar(&f.since, "since", "", "only deliveries created at or after this time (RFC 3339, or a duration ago such as 2h)")
		c.Flags().StringVar(&f.until, "until", "", "only deliveries created before this time")
	}
	_ = c.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(
		[]string{"pending", "delivering", "delivered", "failed", "waiting", "held", "expired"}, cobra.ShellCompDirectiveNoFileComp))
}

func (a *app) searchFilter(f deliveryFilter) (hookd.DeliveryFilter, error) {
	out := hookd.DeliveryFilter{
		Status: optString(f.status), EndpointID: optString(f.endpoint),
		TenantID: optString(f.tenant), MessageID: optString(f.message),
	}
	var err error
	if out.Since, err = a.optTime("since", f.since); err != nil {
		return out, err
	}
	if out.Until, err = a.optTime("until", f.until); err != nil {
		return out, err
	}
	return out, nil
}

func (a *app) deliveriesList() *cobra.Command {
	var f deliveryFilter
	var limit int
	c := &cobra.Command{
		Use:     "list",
		Short:   "List deliveries, newest first",
		Example: "  hookd deliveries list --endpoint ep_01J... --status failed,expired --since 24h",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := a.searchFilter(f)
			if err != nil {
				return err
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.Deliveries.All(cmd.Context(), &filter), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, deliveryColumns)
		},
	}
	f.add(c, true)
	limitFlag(c, &limit)
	return c
}

func (a *app) deliveriesGet() *cobra.Command {
	return &cobra.Command{
		Use:     "get DELIVERY_ID",
		Short:   "Show a delivery",
		Example: "  hookd deliveries get dlv_01J...",
		Args:    exactArgs(1, "DELIVERY_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			d, err := client.Deliveries.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(a.printer(), *d, deliveryColumns)
		},
	}
}

func (a *app) deliveryAction(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:     name + " DELIVERY_ID",
		Short:   short,
		Example: "  hookd deliveries " + name + " dlv_01J...",
		Args:    exactArgs(1, "DELIVERY_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			var d *hookd.Delivery
			if name == "retry" {
				d, err = client.Deliveries.Retry(cmd.Context(), args[0])
			} else {
				d, err = client.Deliveries.Skip(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return printOne(a.printer(), *d, deliveryColumns)
		},
	}
}

func (a *app) deliveriesAttempts() *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:     "attempts DELIVERY_ID",
		Short:   "List a delivery's attempts, newest first",
		Example: "  hookd deliveries attempts dlv_01J...",
		Args:    exactArgs(1, "DELIVERY_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.Deliveries.Attempts(cmd.Context(), args[0], nil), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, attemptColumns)
		},
	}
	limitFlag(c, &limit)
	return c
}
