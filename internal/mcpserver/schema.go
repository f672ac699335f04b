package mcpserver

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The tools' input schemas are read from the API's OpenAPI document: each
// argument is a query parameter or a body field of the API, with the
// document's type, pattern, bounds and description, so the server refuses
// what the API would refuse before calling it, and an agent reads the
// API's own words.

// arg is one tool argument and where its schema is in the document: a
// parameter ("#/components/parameters/Limit"), a schema
// ("#/components/schemas/DeliveryID") or a schema's property
// ("#/components/schemas/RecoverRequest/properties/since").
type arg struct {
	name     string
	ref      string
	required bool
	// description replaces the document's, where the tool's use differs.
	description string
}

// document is a parsed OpenAPI document.
type document struct{ root map[string]any }

func parseDocument(b []byte) (*document, error) {
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("parse the OpenAPI document: %w", err)
	}
	return &document{root: root}, nil
}

// lookup resolves a local JSON pointer such as #/components/schemas/X.
func (d *document) lookup(ref string) (any, error) {
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("%s: only local references are followed", ref)
	}
	var v any = d.root
	for _, part := range strings.Split(path, "/") {
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: no %q", ref, part)
		}
		if v, ok = m[part]; !ok {
			return nil, fmt.Errorf("%s: no %q", ref, part)
		}
	}
	return v, nil
}

// schemaKeywords are the JSON Schema keywords kept from the document: the
// validation keywords and the annotations an agent reads. OpenAPI's own
// keywords (example, discriminator, ...) are left out.
var schemaKeywords = map[string]bool{
	"type": true, "description": true, "title": true, "format": true, "pattern": true, "enum": true, "const": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minLength": true, "maxLength": true, "minItems": true, "maxItems": true, "uniqueItems": true,
	"items": true, "properties": true, "required": true, "additionalProperties": true,
	"oneOf": true, "anyOf": true, "allOf": true, "default": true, "examples": true,
}

// inline returns schema v with every $ref replaced by what it names (its
// siblings, such as a description, win), keeping the schemaKeywords alone.
func (d *document) inline(v any, depth int) (any, error) {
	if depth > 32 {
		return nil, fmt.Errorf("schema nested too deep (a cycle?)")
	}
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		if ref, ok := v["$ref"].(string); ok {
			target, err := d.lookup(ref)
			if err != nil {
				return nil, err
			}
			in, err := d.inline(target, depth+1)
			if err != nil {
				return nil, err
			}
			if m, ok := in.(map[string]any); ok {
				out = m
			}
		}
		for k, sub := range v {
			if !schemaKeywords[k] {
				continue
			}
			var err error
			switch k {
			case "properties":
				props := map[string]any{}
				for name, p := range sub.(map[string]any) {
					if props[name], err = d.inline(p, depth+1); err != nil {
						return nil, err
					}
				}
				out[k] = props
			case "items", "additionalProperties", "oneOf", "anyOf", "allOf":
				if out[k], err = d.inline(sub, depth+1); err != nil {
					return nil, err
				}
			default:
				out[k] = sub
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, sub := range v {
			var err error
			if out[i], err = d.inline(sub, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	default:
		return v, nil
	}
}

// argSchema is the schema of one argument: a parameter's schema with the
// parameter's description, or the schema ref names.
func (d *document) argSchema(a arg) (map[string]any, error) {
	v, err := d.lookup(a.ref)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", a.ref)
	}
	description, _ := m["description"].(string)
	if _, isParam := m["in"]; isParam {
		m, ok = m["schema"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s has no schema", a.ref)
		}
	}
	in, err := d.inline(m, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.ref, err)
	}
	s := in.(map[string]any)
	if description != "" {
		s["description"] = description
	}
	if a.description != "" {
		s["description"] = a.description
	}
	return s, nil
}

// inputSchema is a tool's input schema: an object of args, no other
// property allowed.
func (d *document) inputSchema(args ...arg) (map[string]any, error) {
	props := map[string]any{}
	required := []string{}
	for _, a := range args {
		s, err := d.argSchema(a)
		if err != nil {
			return nil, fmt.Errorf("argument %s: %w", a.name, err)
		}
		props[a.name] = s
		if a.required {
			required = append(required, a.name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}, nil
}

// The document's references the tools use.
const (
	refParams  = "#/components/parameters/"
	refSchemas = "#/components/schemas/"
)

var (
	argTenant     = arg{name: "tenant_id", ref: refParams + "SearchTenant"}
	argSince      = arg{name: "since", ref: refParams + "SearchSince"}
	argUntil      = arg{name: "until", ref: refParams + "SearchUntil"}
	argLimit      = arg{name: "limit", ref: refParams + "Limit", description: "The most items to answer (the newest first)."}
	argDelivery   = arg{name: "delivery_id", ref: refSchemas + "DeliveryID", required: true}
	argEndpoint   = arg{name: "endpoint_id", ref: refSchemas + "EndpointID", required: true}
	argClass      = arg{name: "class", ref: refSchemas + "ClassName", required: true}
	argEventType  = arg{name: "event_type", ref: refParams + "EventTypeFilter"}
	argStatus     = arg{name: "status", ref: refParams + "DeliveryStatusFilter"}
	argEndpointQ  = arg{name: "endpoint_id", ref: refParams + "DeliveryEndpointFilter"}
	argMessageQ   = arg{name: "message_id", ref: refParams + "DeliveryMessageFilter"}
	argBreakerTen = arg{name: "tenant_id", ref: refParams + "TenantFilter", description: "Only this tenant's breakers."}
)
