package mcpserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	hookd "github.com/hookd/hookd/sdk/go"
)

// errWritesOff is every write tool's answer unless the server allows
// writes.
var errWritesOff = errors.New("writes are off: this hookd mcp server was started without --allow-writes, so it changes nothing")

type recoverInput struct {
	EndpointID string `json:"endpoint_id"`
	Since      string `json:"since"`
	Until      string `json:"until,omitempty"`
}

type breakerInput struct {
	EndpointID string `json:"endpoint_id"`
	Reason     string `json:"reason,omitempty"`
}

type endpointInput struct {
	EndpointID string `json:"endpoint_id"`
}

type sendInput struct {
	TenantID  string `json:"tenant_id"`
	EventType string `json:"event_type"`
	Payload   any    `json:"payload,omitempty" jsonschema:"the JSON payload (default: {\"test\": true})"`
}

// writeTool registers a write tool: it answers errWritesOff unless the
// server allows writes, and the API's answer (or refusal) otherwise.
func writeTool[In any](t *tools, s *mcp.Server, tool *mcp.Tool, do func(context.Context, In) (any, error)) {
	destructive := true
	tool.Annotations = &mcp.ToolAnnotations{Title: tool.Annotations.Title, DestructiveHint: &destructive}
	if !t.allowWrites {
		tool.Description += " (Off: the server was started without --allow-writes.)"
	}
	mcp.AddTool(s, tool, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		if !t.allowWrites {
			return failure(errWritesOff)
		}
		v, err := do(ctx, in)
		if err != nil {
			return failure(err)
		}
		return answer(v)
	})
}

func title(s string) *mcp.ToolAnnotations { return &mcp.ToolAnnotations{Title: s} }

func (t *tools) addWrite(s *mcp.Server) {
	writeTool(t, s, &mcp.Tool{
		Name:        "retry_delivery",
		Description: "Queue a failed or expired delivery again, for a new series of attempts. Answers the delivery.",
		Annotations: title("Retry a delivery"),
		InputSchema: t.schema(argDelivery),
	}, func(ctx context.Context, in deliveryInput) (any, error) {
		if in.DeliveryID == "" {
			return nil, errors.New("delivery_id is required")
		}
		return t.client.Deliveries.Retry(ctx, in.DeliveryID)
	})

	writeTool(t, s, &mcp.Tool{
		Name:        "recover_endpoint",
		Description: "Queue again an endpoint's failed deliveries created in a time range, released at a pace once the endpoint answers. Answers how many were queued.",
		Annotations: title("Recover an endpoint"),
		InputSchema: t.schema(argEndpoint,
			arg{name: "since", ref: refSchemas + "RecoverRequest/properties/since", required: true},
			arg{name: "until", ref: refSchemas + "RecoverRequest/properties/until"}),
	}, func(ctx context.Context, in recoverInput) (any, error) {
		if in.EndpointID == "" || in.Since == "" {
			return nil, errors.New("endpoint_id and since are required")
		}
		since, err := optTime("since", in.Since)
		if err != nil {
			return nil, err
		}
		until, err := optTime("until", in.Until)
		if err != nil {
			return nil, err
		}
		return t.client.Endpoints.Recover(ctx, in.EndpointID, hookd.RecoverRequest{Since: *since, Until: until})
	})

	writeTool(t, s, &mcp.Tool{
		Name:        "reset_breaker",
		Description: "Close an endpoint's circuit breaker (an isolated one too), so its deliveries flow again (admin tokens). Answers the breaker.",
		Annotations: title("Reset a breaker"),
		InputSchema: t.schema(argEndpoint, arg{name: "reason", ref: refSchemas + "OperateBreakerRequest/properties/reason"}),
	}, func(ctx context.Context, in breakerInput) (any, error) {
		if in.EndpointID == "" {
			return nil, errors.New("endpoint_id is required")
		}
		return t.client.Breakers.Reset(ctx, in.EndpointID, in.Reason)
	})

	writeTool(t, s, &mcp.Tool{
		Name:        "disable_endpoint",
		Description: "Disable an endpoint: its deliveries are held until it is enabled again. Answers the endpoint.",
		Annotations: title("Disable an endpoint"),
		InputSchema: t.schema(argEndpoint),
	}, func(ctx context.Context, in endpointInput) (any, error) {
		if in.EndpointID == "" {
			return nil, errors.New("endpoint_id is required")
		}
		return t.client.Endpoints.Disable(ctx, in.EndpointID)
	})

	writeTool(t, s, &mcp.Tool{
		Name:        "send_test_event",
		Description: "Send a message to a tenant's subscribed endpoints. Answers the accepted message and its deliveries.",
		Annotations: title("Send a test event"),
		InputSchema: t.schema(
			arg{name: "tenant_id", ref: refSchemas + "CreateMessageRequest/properties/tenant_id", required: true},
			arg{name: "event_type", ref: refSchemas + "CreateMessageRequest/properties/event_type", required: true},
			arg{name: "payload", ref: refSchemas + "CreateMessageRequest/properties/payload", description: `The message's payload: any JSON value ({"test": true} when absent).`}),
	}, func(ctx context.Context, in sendInput) (any, error) {
		if in.TenantID == "" || in.EventType == "" {
			return nil, errors.New("tenant_id and event_type are required")
		}
		payload := in.Payload
		if payload == nil {
			payload = json.RawMessage(`{"test":true}`)
		}
		return t.client.Messages.Send(ctx, hookd.NewMessage{TenantID: in.TenantID, EventType: in.EventType, Payload: payload})
	})
}
