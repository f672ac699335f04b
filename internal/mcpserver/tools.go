package mcpserver

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

// tools holds what every tool's handler needs.
type tools struct {
	client      *hookd.Client
	allowWrites bool
	doc         *document
	err         error // the first input schema that could not be read
}

// schema is a tool's input schema from the API's document.
func (t *tools) schema(args ...arg) any {
	s, err := t.doc.inputSchema(args...)
	if err != nil && t.err == nil {
		t.err = err
	}
	return s
}

// maxItems bounds a search tool's answer: an agent's context is small.
const maxItems = 250

// The read tools' inputs: the API's query parameters of the same names
// (their schemas are the document's: schema.go).
type searchMessagesInput struct {
	TenantID  string `json:"tenant_id,omitempty"`
	EventType string `json:"event_type,omitempty"`
	Since     string `json:"since,omitempty"`
	Until     string `json:"until,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

type searchDeliveriesInput struct {
	Status     string `json:"status,omitempty"`
	EndpointID string `json:"endpoint_id,omitempty"`
	TenantID   string `json:"tenant_id,omitempty"`
	MessageID  string `json:"message_id,omitempty"`
	Since      string `json:"since,omitempty"`
	Until      string `json:"until,omitempty"`
	Limit      int    `json:"limit,omitempty"`
}

type deliveryInput struct {
	DeliveryID string `json:"delivery_id"`
}

type breakersInput struct {
	TenantID string `json:"tenant_id,omitempty"`
}

type classInput struct {
	Class string `json:"class"`
}

// explanation is explain_delivery's answer: the API's answers about a
// delivery, and what they say in words.
type explanation struct {
	Summary  []string        `json:"summary"`
	Delivery hookd.Delivery  `json:"delivery"`
	Attempts []hookd.Attempt `json:"attempts"`
	Endpoint *hookd.Endpoint `json:"endpoint,omitempty"`
	Breaker  *hookd.Breaker  `json:"breaker,omitempty"`
	Errors   []string        `json:"errors,omitempty"`
}

func readOnly(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, IdempotentHint: true}
}

func (t *tools) addRead(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "search_messages",
		Description: "Search messages, newest first, by tenant, event type and creation time. Answers the API's message summaries.",
		Annotations: readOnly("Search messages"),
		InputSchema: t.schema(argTenant, argEventType, argSince, argUntil, argLimit),
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in searchMessagesInput) (*mcp.CallToolResult, any, error) {
		f := hookd.MessageFilter{TenantID: opt(in.TenantID), EventType: opt(in.EventType)}
		var err error
		if f.Since, err = optTime("since", in.Since); err != nil {
			return failure(err)
		}
		if f.Until, err = optTime("until", in.Until); err != nil {
			return failure(err)
		}
		items, err := take(t.client.Messages.All(ctx, &f), limit(in.Limit))
		if err != nil {
			return failure(err)
		}
		return answer(items)
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "search_deliveries",
		Description: "Search deliveries, newest first, by status, endpoint, tenant, message and creation time. Answers the API's deliveries.",
		Annotations: readOnly("Search deliveries"),
		InputSchema: t.schema(argStatus, argEndpointQ, argTenant, argMessageQ, argSince, argUntil, argLimit),
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in searchDeliveriesInput) (*mcp.CallToolResult, any, error) {
		f := hookd.DeliveryFilter{Status: opt(in.Status), EndpointID: opt(in.EndpointID), TenantID: opt(in.TenantID), MessageID: opt(in.MessageID)}
		var err error
		if f.Since, err = optTime("since", in.Since); err != nil {
			return failure(err)
		}
		if f.Until, err = optTime("until", in.Until); err != nil {
			return failure(err)
		}
		items, err := take(t.client.Deliveries.All(ctx, &f), limit(in.Limit))
		if err != nil {
			return failure(err)
		}
		return answer(items)
	})

	mcp.AddTool(s, &mcp.Tool{
		Name: "explain_delivery",
		Description: "Explain why a delivery failed or waits: the delivery, its attempts (newest first, with status codes, " +
			"error classes and response excerpts), its endpoint and the endpoint's circuit breaker, and a summary in words.",
		Annotations: readOnly("Explain a delivery"),
		InputSchema: t.schema(argDelivery),
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in deliveryInput) (*mcp.CallToolResult, any, error) {
		if in.DeliveryID == "" {
			return failure(fmt.Errorf("delivery_id is required"))
		}
		d, err := t.client.Deliveries.Get(ctx, in.DeliveryID)
		if err != nil {
			return failure(err)
		}
		ex := explanation{Delivery: *d}
		if ex.Attempts, err = take(t.client.Deliveries.Attempts(ctx, d.ID, nil), 20); err != nil {
			return failure(err)
		}
		// The endpoint and its breaker complete the picture; a token that
		// may read the delivery may read both, but say so if not.
		if ex.Endpoint, err = t.client.Endpoints.Get(ctx, d.EndpointID); err != nil {
			ex.Errors = append(ex.Errors, "endpoint: "+err.Error())
		}
		if ex.Breaker, err = t.client.Breakers.Get(ctx, d.EndpointID); err != nil {
			ex.Errors = append(ex.Errors, "breaker: "+err.Error())
		}
		ex.Summary = summarize(ex)
		return answer(ex)
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_open_breakers",
		Description: "List the circuit breakers that are not closed (open, half_open, isolated), each with what tripped it (tripped.reason and its figures).",
		Annotations: readOnly("List open breakers"),
		InputSchema: t.schema(argBreakerTen),
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in breakersInput) (*mcp.CallToolResult, any, error) {
		out := []hookd.Breaker{}
		for _, st := range []api.BreakerState{api.BreakerStateOpen, api.BreakerStateHalfOpen, api.BreakerStateIsolated} {
			items, err := take(t.client.Breakers.All(ctx, &hookd.BreakerFilter{State: &st, TenantID: opt(in.TenantID)}), maxItems)
			if err != nil {
				return failure(err)
			}
			out = append(out, items...)
		}
		return answer(out)
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "class_recommendation",
		Description: "Show the automatic tuner's latest recommendation for a traffic class: current and proposed settings, their figures, the evidence and the reasons (admin tokens).",
		Annotations: readOnly("Show a class's recommendation"),
		InputSchema: t.schema(argClass),
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in classInput) (*mcp.CallToolResult, any, error) {
		if in.Class == "" {
			return failure(fmt.Errorf("class is required"))
		}
		r, err := t.client.TrafficClasses.Recommendation(ctx, in.Class)
		if err != nil {
			return failure(err)
		}
		return answer(r)
	})
}

// summarize says in words what a delivery's answers show.
func summarize(ex explanation) []string {
	d := ex.Delivery
	var out []string
	out = append(out, fmt.Sprintf("Delivery %s of message %s to endpoint %s is %s after %d attempt(s) (series %d).",
		d.ID, d.MessageID, d.EndpointID, d.Status, d.AttemptCount, d.Series))
	if len(ex.Attempts) > 0 {
		a := ex.Attempts[0]
		line := fmt.Sprintf("The last attempt (#%d at %s) was classified %s", a.AttemptNumber, a.AttemptedAt.UTC().Format(time.RFC3339), a.Classification)
		if a.StatusCode != nil {
			line += fmt.Sprintf(", status %d", *a.StatusCode)
		}
		if a.ErrorClass != nil {
			line += ", error " + *a.ErrorClass
		}
		out = append(out, line+".")
	}
	if d.LastError != nil && *d.LastError != "" {
		out = append(out, "Last error: "+*d.LastError)
	}
	switch d.Status {
	case api.DeliveryStatusWaiting:
		if d.BreakerOpenUntil != nil {
			out = append(out, "It waits for the endpoint's open circuit breaker, until "+d.BreakerOpenUntil.UTC().Format(time.RFC3339)+".")
		} else {
			out = append(out, "It waits behind the head of the endpoint's FIFO queue.")
		}
	case api.DeliveryStatusHeld:
		out = append(out, "It is held: the endpoint is disabled; enabling it releases the delivery.")
	case api.DeliveryStatusFailed:
		out = append(out, "Its retries are used up; retry_delivery (or recover_endpoint for many) queues it again.")
	case api.DeliveryStatusPending:
		if d.NextAttemptAt != nil {
			out = append(out, "Its next attempt is due at "+d.NextAttemptAt.UTC().Format(time.RFC3339)+".")
		}
	}
	if ex.Endpoint != nil && ex.Endpoint.DisabledReason != nil {
		out = append(out, "The endpoint is disabled: "+*ex.Endpoint.DisabledReason)
	}
	if b := ex.Breaker; b != nil && b.State != api.BreakerStateClosed {
		line := fmt.Sprintf("The endpoint's breaker is %s", b.State)
		if b.Tripped != nil {
			line += " (tripped: " + b.Tripped.Reason + ")"
		}
		out = append(out, line+".")
	}
	return out
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(name, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not an RFC 3339 time", name, s)
	}
	return &t, nil
}

func limit(n int) int {
	switch {
	case n <= 0:
		return 50
	case n > maxItems:
		return maxItems
	}
	return n
}

// take reads up to n items of a paged list.
func take[T any](seq iter.Seq2[T, error], n int) ([]T, error) {
	out := []T{}
	for item, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, item)
		if len(out) >= n {
			break
		}
	}
	return out, nil
}
