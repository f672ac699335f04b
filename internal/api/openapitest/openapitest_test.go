package openapitest_test

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api/openapitest"
)

const doc = `{
  "openapi": "3.1.0",
  "info": {"title": "t", "version": "1"},
  "paths": {
    "/v1/things/{id}": {
      "get": {
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {
          "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
          "204": {"description": "none"},
          "default": {"description": "problem", "content": {"application/problem+json": {"schema": {
            "type": "object", "required": ["status"], "properties": {"status": {"type": "integer", "minimum": 400}}
          }}}}
        }
      }
    }
  },
  "components": {"schemas": {
    "Id": {"type": "string", "pattern": "^th_[0-9a-z]{4}$"},
    "Thing": {
      "type": "object", "additionalProperties": false, "required": ["id", "at"],
      "properties": {
        "id": {"$ref": "#/components/schemas/Id"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
        "note": {"type": ["string", "null"]}
      }
    }
  }}
}`

func load(t *testing.T) (*openapi3.T, *openapitest.Schemas) {
	t.Helper()
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData([]byte(doc))
	require.NoError(t, err)
	require.NoError(t, d.Validate(loader.Context))
	s, err := openapitest.New([]byte(doc), d)
	require.NoError(t, err)
	return d, s
}

func TestValidate(t *testing.T) {
	t.Parallel()
	d, s := load(t)
	thing := d.Components.Schemas["Thing"].Value
	for _, tc := range []struct {
		name string
		body string
		ok   bool
	}{
		{"valid", `{"id": "th_ab12", "at": "2026-12-02T10:00:00Z", "tags": ["a"], "note": null}`, true},
		{"a $ref'd pattern", `{"id": "th_AB12", "at": "2026-12-02T10:00:00Z"}`, false},
		{"a format", `{"id": "th_ab12", "at": "yesterday"}`, false},
		{"required", `{"id": "th_ab12"}`, false},
		{"additional properties", `{"id": "th_ab12", "at": "2026-12-02T10:00:00Z", "x": 1}`, false},
		{"items", `{"id": "th_ab12", "at": "2026-12-02T10:00:00Z", "tags": ["long"]}`, false},
		{"a type list", `{"id": "th_ab12", "at": "2026-12-02T10:00:00Z", "note": 3}`, false},
		{"not JSON", `{"id": `, false},
	} {
		err := s.ValidateJSON(thing, []byte(tc.body))
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.name, err)
	}
	// A nested schema is compiled where it sits in the document.
	tags := thing.Properties["tags"].Value
	require.NoError(t, s.Validate(tags, []any{"a", "b"}))
	require.Error(t, s.Validate(tags, []any{"abcd"}))
	require.Error(t, s.Validate(&openapi3.Schema{}, "x"), "a schema not in the document")
}

func TestResponseSchema(t *testing.T) {
	t.Parallel()
	d, s := load(t)
	op := d.Paths.Find("/v1/things/{id}").Get

	schema, ok := openapitest.ResponseSchema(op, 200, "application/json")
	require.True(t, ok)
	require.Same(t, d.Components.Schemas["Thing"].Value, schema)

	_, ok = openapitest.ResponseSchema(op, 200, "text/plain")
	require.False(t, ok, "an undocumented content type")

	schema, ok = openapitest.ResponseSchema(op, 204, "")
	require.True(t, ok)
	require.Nil(t, schema, "no body documented")

	schema, ok = openapitest.ResponseSchema(op, 404, "application/problem+json")
	require.True(t, ok, "the default response")
	require.NoError(t, s.ValidateJSON(schema, []byte(`{"status": 404}`)))
	require.Error(t, s.ValidateJSON(schema, []byte(`{"status": 200}`)))
}
