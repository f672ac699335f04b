package cli

import (
	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
)

var eventTypeColumns = []column[hookd.EventType]{
	{"NAME", func(e hookd.EventType) string { return e.Name }},
	{"DESCRIPTION", func(e hookd.EventType) string { return e.Description }},
	{"SCHEMA", func(e hookd.EventType) string { return fmtBool(e.Schema != nil) }},
	{"ARCHIVED", func(e hookd.EventType) string { return fmtBool(e.Archived) }},
	{"UPDATED", func(e hookd.EventType) string { return fmtTime(e.UpdatedAt) }},
}

func (a *app) eventTypesCommand() *cobra.Command {
	var limit int
	list := &cobra.Command{
		Use:     "list",
		Short:   "List the event type catalogue",
		Example: "  hookd event-types list",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.EventTypes.All(cmd.Context(), nil), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, eventTypeColumns)
		},
	}
	limitFlag(list, &limit)
	get := &cobra.Command{
		Use:     "get NAME",
		Short:   "Show an event type with its schema",
		Example: "  hookd event-types get invoice.paid",
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			e, err := client.EventTypes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(a.printer(), *e, eventTypeColumns)
		},
	}
	return group("event-types", "Read the event type catalogue", list, get)
}
