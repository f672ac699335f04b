package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

var endpointColumns = []column[hookd.Endpoint]{
	{"ID", func(e hookd.Endpoint) string { return e.ID }},
	{"TENANT", func(e hookd.Endpoint) string { return e.TenantID }},
	{"URL", func(e hookd.Endpoint) string { return e.URL }},
	{"STATUS", func(e hookd.Endpoint) string { return string(e.Status) }},
	{"EVENT TYPES", func(e hookd.Endpoint) string { return strings.Join(e.EventTypes, ",") }},
	{"CLASS", func(e hookd.Endpoint) string { return e.TrafficClass }},
	{"CREATED", func(e hookd.Endpoint) string { return fmtTime(e.CreatedAt) }},
}

func (a *app) endpointsCommand() *cobra.Command {
	return group("endpoints", "Register and manage webhook endpoints",
		a.endpointsList(), a.endpointsGet(), a.endpointsCreate(), a.endpointsUpdate(),
		a.endpointAction("disable", "Stop deliveries to an endpoint; they are held until enable"),
		a.endpointAction("enable", "Resume deliveries to a disabled endpoint, releasing the held ones"),
		a.endpointsDelete(), a.endpointsSecret(), a.endpointAction("rotate-secret", "Replace an endpoint's secret; the previous one signs alongside for 24 hours"),
	)
}

func (a *app) endpointsList() *cobra.Command {
	var tenant string
	var limit int
	c := &cobra.Command{
		Use:     "list",
		Short:   "List endpoints",
		Example: "  hookd endpoints list --tenant acme",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := collect(client.Endpoints.All(cmd.Context(), &hookd.EndpointFilter{TenantID: optString(tenant)}), limit)
			if err != nil {
				return err
			}
			return printList(a.printer(), items, endpointColumns)
		},
	}
	c.Flags().StringVar(&tenant, "tenant", "", "only this tenant's endpoints")
	limitFlag(c, &limit)
	return c
}

func (a *app) endpointsGet() *cobra.Command {
	return &cobra.Command{
		Use:     "get ENDPOINT_ID",
		Short:   "Show an endpoint",
		Example: "  hookd endpoints get ep_01J...",
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			ep, err := client.Endpoints.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(a.printer(), *ep, endpointColumns)
		},
	}
}

// endpointFields are the flags create and update share.
type endpointFields struct {
	url, description, trafficClass, secret, signing, ordering string
	eventTypes                                                []string
	metadata                                                  map[string]string
	body                                                      string
}

func (f *endpointFields) add(c *cobra.Command, create bool) {
	c.Flags().StringVar(&f.url, "url", "", "the URL webhooks are POSTed to")
	c.Flags().StringVar(&f.description, "description", "", "a description")
	c.Flags().StringSliceVar(&f.eventTypes, "event-type", nil, "an event type (or prefix.*) the endpoint subscribes to; repeat for more (default: every event)")
	c.Flags().StringToStringVar(&f.metadata, "metadata", nil, "key=value metadata; repeat for more")
	c.Flags().StringVar(&f.trafficClass, "traffic-class", "", "the endpoint's traffic class")
	c.Flags().StringVar(&f.body, "body", "", "the whole request as JSON (a file with @path, standard input with -); flags override its fields")
	if create {
		c.Flags().StringVar(&f.secret, "secret", "", "the whsec_ signing secret (default: generated)")
		c.Flags().StringVar(&f.signing, "signing", "", "hmac (default) or ed25519")
		c.Flags().StringVar(&f.ordering, "ordering", "", "none (default) or fifo")
	}
}

// readBody reads a JSON argument: inline, @file or - for standard input.
func (a *app) readBody(flag, s string, into any) error {
	var b []byte
	switch {
	case s == "-":
		raw, err := io.ReadAll(a.env.Stdin)
		if err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
		b = raw
	case strings.HasPrefix(s, "@"):
		raw, err := os.ReadFile(s[1:])
		if err != nil {
			return usagef("--%s: %v", flag, err)
		}
		b = raw
	default:
		b = []byte(s)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return usagef("--%s is not valid JSON: %v", flag, err)
	}
	return nil
}

func (a *app) endpointsCreate() *cobra.Command {
	var f endpointFields
	var tenant string
	c := &cobra.Command{
		Use:     "create --tenant TENANT --url URL",
		Short:   "Register an endpoint",
		Example: "  hookd endpoints create --tenant acme --url https://acme.example/hooks --event-type 'invoice.*'",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var req hookd.CreateEndpointRequest
			if f.body != "" {
				if err := a.readBody("body", f.body, &req); err != nil {
					return err
				}
			}
			if tenant != "" {
				req.TenantID = tenant
			}
			if f.url != "" {
				req.URL = &f.url
			}
			// A destination endpoint (type and destination in --body) has
			// no url.
			if req.TenantID == "" || ((req.URL == nil || *req.URL == "") && req.Destination == nil) {
				return usagef("endpoints create needs --tenant and --url")
			}
			if f.description != "" {
				req.Description = &f.description
			}
			if f.eventTypes != nil {
				req.EventTypes = &f.eventTypes
			}
			if f.metadata != nil {
				m := api.Metadata(f.metadata)
				req.Metadata = &m
			}
			if f.trafficClass != "" {
				req.TrafficClass = &f.trafficClass
			}
			if f.secret != "" {
				req.Secret = &f.secret
			}
			if f.signing != "" {
				s := hookd.Signing(f.signing)
				req.Signing = &s
			}
			if f.ordering != "" {
				o := api.Ordering(f.ordering)
				req.Ordering = &o
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			ep, err := client.Endpoints.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printOne(a.printer(), *ep, endpointColumns)
		},
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant whose messages the endpoint receives")
	f.add(c, true)
	return c
}

func (a *app) endpointsUpdate() *cobra.Command {
	var f endpointFields
	c := &cobra.Command{
		Use:     "update ENDPOINT_ID",
		Short:   "Change the fields of an endpoint that flags set",
		Example: "  hookd endpoints update ep_01J... --url https://acme.example/v2/hooks",
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req hookd.UpdateEndpointRequest
			if f.body != "" {
				if err := a.readBody("body", f.body, &req); err != nil {
					return err
				}
			}
			if f.url != "" {
				req.URL = &f.url
			}
			if f.description != "" {
				req.Description = &f.description
			}
			if f.eventTypes != nil {
				req.EventTypes = &f.eventTypes
			}
			if f.metadata != nil {
				m := api.Metadata(f.metadata)
				req.Metadata = &m
			}
			if f.trafficClass != "" {
				req.TrafficClass = &f.trafficClass
			}
			if req == (hookd.UpdateEndpointRequest{}) {
				return usagef("endpoints update needs a field to change (--url, --description, --event-type, --metadata, --traffic-class or --body)")
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			ep, err := client.Endpoints.Update(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return printOne(a.printer(), *ep, endpointColumns)
		},
	}
	f.add(c, false)
	return c
}

// endpointAction is a command of one endpoint id answered by the endpoint:
// disable, enable, rotate-secret.
func (a *app) endpointAction(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:     name + " ENDPOINT_ID",
		Short:   short,
		Example: "  hookd endpoints " + name + " ep_01J...",
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			ctx, id := cmd.Context(), args[0]
			var ep *hookd.Endpoint
			switch name {
			case "disable":
				ep, err = client.Endpoints.Disable(ctx, id)
			case "enable":
				var en *hookd.EnabledEndpoint
				en, err = client.Endpoints.Enable(ctx, id)
				if err == nil {
					if a.printer().json {
						return a.printer().writeJSON(en)
					}
					ep, err = client.Endpoints.Get(ctx, id)
					if err == nil {
						fmt.Fprintf(a.env.Stderr, "Releasing %d held deliveries.\n", en.Releasing)
					}
				}
			case "rotate-secret":
				ep, err = client.Endpoints.RotateSecret(ctx, id)
			}
			if err != nil {
				return err
			}
			return printOne(a.printer(), *ep, endpointColumns)
		},
	}
}

func (a *app) endpointsDelete() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ENDPOINT_ID",
		Short:   "Delete an endpoint",
		Example: "  hookd endpoints delete ep_01J...",
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			if err := client.Endpoints.Delete(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "Deleted %s.\n", args[0])
			return nil
		},
	}
}

func (a *app) endpointsSecret() *cobra.Command {
	return &cobra.Command{
		Use:     "secret ENDPOINT_ID",
		Short:   "Show what verifies an endpoint's signatures (its whsec_ secret or whpk_ public key)",
		Example: "  hookd endpoints secret ep_01J...",
		Args:    exactArgs(1, "ENDPOINT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			s, err := client.Endpoints.Secret(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := a.printer()
			if p.json {
				return p.writeJSON(s)
			}
			secret, err := s.Secret.MarshalJSON()
			if err != nil {
				return fmt.Errorf("read secret: %w", err)
			}
			var text string
			_ = json.Unmarshal(secret, &text)
			return printOne(p, *s, []column[hookd.EndpointSecret]{
				{"SIGNING", func(s hookd.EndpointSecret) string { return string(s.Signing) }},
				{"SECRET", func(hookd.EndpointSecret) string { return text }},
				{"PREVIOUS", func(s hookd.EndpointSecret) string { return fmtStr(s.PreviousSecret) }},
				{"PREVIOUS EXPIRES", func(s hookd.EndpointSecret) string { return fmtTimePtr(s.PreviousSecretExpiresAt) }},
			})
		},
	}
}
