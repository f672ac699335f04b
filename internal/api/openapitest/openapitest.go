// Package openapitest validates values against the schemas of an OpenAPI
// 3.1 document loaded by kin-openapi, with the JSON Schema 2020-12
// validator kin-openapi itself uses, but compiling each schema once.
// kin-openapi compiles a schema again on every validation (with its
// patterns), which made most of internal/api's test time.
package openapitest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// docURL is where the document is registered with the compiler; schemas
// are compiled as fragments of it, so their $refs resolve in place.
const docURL = "mem:///openapi.json"

// Schemas compiles the schemas of one document on first use and keeps
// them. It is safe for concurrent use.
type Schemas struct {
	// pointers maps each schema of the loaded document to its JSON pointer
	// in the raw document (a component's own for every $ref to it).
	pointers map[*openapi3.Schema]string

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

// New returns the schemas of doc, which kin-openapi loaded from raw.
func New(raw []byte, doc *openapi3.T) (*Schemas, error) {
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse document: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, parsed); err != nil {
		return nil, fmt.Errorf("add document: %w", err)
	}
	s := &Schemas{pointers: map[*openapi3.Schema]string{}, compiler: c, compiled: map[string]*jsonschema.Schema{}}
	s.index(doc)
	return s, nil
}

// Validate checks value (as encoding/json or jsonschema.UnmarshalJSON
// decodes JSON) against schema, a schema of the document.
func (s *Schemas) Validate(schema *openapi3.Schema, value any) error {
	ptr, ok := s.pointers[schema]
	if !ok {
		return fmt.Errorf("openapitest: a schema not reached from the document's components or paths")
	}
	return s.ValidateAt(ptr, value)
}

// ValidateAt checks value against the schema at ptr, a JSON pointer into
// the document ("/components/schemas/Endpoint").
func (s *Schemas) ValidateAt(ptr string, value any) error {
	s.mu.Lock()
	sch, ok := s.compiled[ptr]
	if !ok {
		var err error
		if sch, err = s.compiler.Compile(docURL + "#" + ptr); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("compile %s: %w", ptr, err)
		}
		s.compiled[ptr] = sch
	}
	s.mu.Unlock()
	return sch.Validate(value)
}

// ValidateJSON decodes body as JSON and checks it against schema.
func (s *Schemas) ValidateJSON(schema *openapi3.Schema, body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("decode body: %w", err)
	}
	return s.Validate(schema, v)
}

// index records the pointer of every schema reachable from the document's
// component schemas, then from its component request bodies and
// responses, then from its operations; a schema reached twice (a $ref)
// keeps the first pointer, its component's.
func (s *Schemas) index(doc *openapi3.T) {
	if doc.Components != nil {
		for name, ref := range doc.Components.Schemas {
			s.walk(ref, "/components/schemas/"+escape(name))
		}
		for name, ref := range doc.Components.RequestBodies {
			if ref.Value != nil {
				s.content(ref.Value.Content, "/components/requestBodies/"+escape(name))
			}
		}
		for name, ref := range doc.Components.Responses {
			if ref.Value != nil {
				s.content(ref.Value.Content, "/components/responses/"+escape(name))
			}
		}
	}
	if doc.Paths == nil {
		return
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			at := "/paths/" + escape(path) + "/" + strings.ToLower(method)
			if op.RequestBody != nil && op.RequestBody.Ref == "" && op.RequestBody.Value != nil {
				s.content(op.RequestBody.Value.Content, at+"/requestBody")
			}
			if op.Responses == nil {
				continue
			}
			for status, ref := range op.Responses.Map() {
				if ref.Ref == "" && ref.Value != nil {
					s.content(ref.Value.Content, at+"/responses/"+escape(status))
				}
			}
		}
	}
}

func (s *Schemas) content(c openapi3.Content, at string) {
	for mime, mt := range c {
		if mt.Schema != nil {
			s.walk(mt.Schema, at+"/content/"+escape(mime)+"/schema")
		}
	}
}

// walk records ref's schema at ptr and descends into its subschemas,
// unless the schema is a $ref (recorded where it is defined) or seen.
func (s *Schemas) walk(ref *openapi3.SchemaRef, ptr string) {
	if ref == nil || ref.Value == nil || ref.Ref != "" {
		return
	}
	v := ref.Value
	if _, seen := s.pointers[v]; seen {
		return
	}
	s.pointers[v] = ptr
	for name, p := range v.Properties {
		s.walk(p, ptr+"/properties/"+escape(name))
	}
	s.walk(v.Items, ptr+"/items")
	s.walk(v.Not, ptr+"/not")
	if v.AdditionalProperties.Schema != nil {
		s.walk(v.AdditionalProperties.Schema, ptr+"/additionalProperties")
	}
	for kw, list := range map[string]openapi3.SchemaRefs{"allOf": v.AllOf, "anyOf": v.AnyOf, "oneOf": v.OneOf, "prefixItems": v.PrefixItems} {
		for i, r := range list {
			s.walk(r, ptr+"/"+kw+"/"+strconv.Itoa(i))
		}
	}
}

// escape escapes a JSON pointer token.
func escape(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// ResponseSchema returns the schema op documents for a response of status
// with content type mime, as kin-openapi picks it (the status, else
// default), or nil when it documents no body; ok is false when it
// documents no such status or no such content type.
func ResponseSchema(op *openapi3.Operation, status int, mime string) (schema *openapi3.Schema, ok bool) {
	if op.Responses == nil {
		return nil, false
	}
	ref := op.Responses.Status(status)
	if ref == nil {
		ref = op.Responses.Default()
	}
	if ref == nil || ref.Value == nil {
		return nil, false
	}
	if len(ref.Value.Content) == 0 {
		return nil, true
	}
	mt := ref.Value.Content.Get(mime)
	if mt == nil {
		return nil, false
	}
	if mt.Schema == nil {
		return nil, true
	}
	return mt.Schema.Value, true
}
