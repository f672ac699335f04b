package cli

import (
	"encoding/json"
	"strconv"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
)

var messageColumns = []column[hookd.MessageSummary]{
	{"ID", func(m hookd.MessageSummary) string { return m.ID }},
	{"TENANT", func(m hookd.MessageSummary) string { return m.TenantID }},
	{"EVENT TYPE", func(m hookd.MessageSummary) string { return m.EventType }},
	{"CREATED", func(m hookd.MessageSummary) string { return fmtTime(m.CreatedAt) }},
}

func (a *app) messagesCommand() *cobra.Command {
	return group("messages", "Send and find messages", a.messagesSend(), a.messagesGet(), a.messagesList())
}

func (a *app) messagesSend() *cobra.Command {
	var tenant, eventType, payload, key string
	c := &cobra.Command{
		Use:     "send --tenant TENANT --event-type TYPE --payload JSON",
		Short:   "Send a message to a tenant's subscribed endpoints",
		Example: `  hookd messages send --tenant acme --event-type invoice.paid --payload '{"invoice":"in_1"}'`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" || eventType == "" {
				return usagef("messages send needs --tenant and --event-type")
			}
			var body json.RawMessage
			if err := a.readBody("payload", payload, &body); err != nil {
				return err
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			m, err := client.Messages.Send(cmd.Context(), hookd.NewMessage{TenantID: tenant, EventType: eventType, Payload: body, IdempotencyKey: key})
			if err != nil {
				return err
			}
			return printOne(a.printer(), *m, []column[hookd.MessageAccepted]{
				{"ID", func(m hookd.MessageAccepted) string { return m.ID }},
				{"TENANT", func(m hookd.MessageAccepted) string { return m.TenantID }},
				{"EVENT TYPE", func(m hookd.MessageAccepted) string { return m.EventType }},
				{"DELIVERIES", func(m hookd.MessageAccepted) string { return strconv.Itoa(len(m.Deliveries)) }},
				{"CREATED", func(m hookd.MessageAccepted) string { return fmtTime(m.CreatedAt) }},
			})
		},
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant whose endpoints receive the message")
	c.Flags().StringVar(&eventType, "event-type", "", "the event type, such as invoice.paid")
	c.Flags().StringVar(&payload, "payload", "{}", "the JSON payload (a file with @path, standard input with -)")
	c.Flags().StringVar(&key, "idempotency-key", "", "a key that makes a repeated send store one message (default: generated)")
	return c
}

func (a *app) messagesGet() *cobra.Command {
	return &cobra.Command{
		Use:     "get MESSAGE_ID",
		Short:   "Show a message with its payload and deliveries",
		Example: "  hookd messages get msg_01J...",
		Args:    exactArgs(1, "MESSAGE_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			m, err := client.Messages.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := a.printer()
			if p.json {
				return p.writeJSON(m)
			}
			if err := printOne(p, *m, []column[hookd.Message]{
				{"ID", func(m hookd.Message) string { return m.ID }},
				{"TENANT", func(m hookd.Message) string { return m.TenantID }},
				{"EVENT TYPE", func(m hookd.Message) string { return m.EventType }},
				{"CREATED", func(m hookd.Message) string { return fmtTime(m.CreatedAt) }},
				{"PAYLOAD", func(m hookd.Message) string { return string(m.Payload) }},
			}); err != nil {
				return err
			}
			p.out.Write([]byte("\n"))
			return printList(p, m.Deliveries, deliveryColumns)
		},
	}
}

func (a *app) messagesList() *cobra.Command {
	var tenant, eventType, since, until string
	var limit int
	c := &cobra.Command{
		Use:     "list",
		Short:   "List messages, newest first",
		Example: "  hookd messages list --tenant acme --event-type invoice.paid --since 1h",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := hookd.MessageFilter{TenantID: optString(tenant), EventType: optString(eventType)}
			var err error
			if f.Since, err = a.optTime("since", since); err != nil {
				return err
			}
			if f.Until, err = a.optTime("until", until); err != nil {
				return err
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.Messages.All(cmd.Context(), &f), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, messageColumns)
		},
	}
	c.Flags().StringVar(&tenant, "tenant", "", "only this tenant's messages")
	c.Flags().StringVar(&eventType, "event-type", "", "only messages of this event type")
	c.Flags().StringVar(&since, "since", "", "only messages created at or after this time (RFC 3339, or a duration ago such as 2h)")
	c.Flags().StringVar(&until, "until", "", "only messages created before this time")
	limitFlag(c, &limit)
	return c
}
