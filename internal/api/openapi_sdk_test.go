package api_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// operationIDPattern is what the client generators (sdk/go, sdk/typescript)
// turn into a method name: lowerCamelCase letters and digits.
var operationIDPattern = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// TestOpenAPIOperationsAreGeneratable checks what the client libraries'
// generators need of every operation: an operationId usable as a method
// name, and every request and response body a named schema under
// components/schemas, so each body has a type of its own in every
// language. The SDKs' own tests check each operation has its generated
// method.
func TestOpenAPIOperationsAreGeneratable(t *testing.T) {
	t.Parallel()
	doc, _ := loadDocument(t)
	for key, op := range operations(doc) {
		t.Run(key, func(t *testing.T) {
			require.Regexp(t, operationIDPattern, op.OperationID)
			if op.RequestBody != nil {
				for ct, media := range op.RequestBody.Value.Content {
					require.NotNil(t, media.Schema, "request %s", ct)
					require.True(t, strings.HasPrefix(media.Schema.Ref, "#/components/schemas/"), "the %s request body is a named schema, not %q", ct, media.Schema.Ref)
				}
			}
			for code, resp := range op.Responses.Map() {
				for ct, media := range resp.Value.Content {
					require.NotNil(t, media.Schema, "%s %s", code, ct)
					require.True(t, strings.HasPrefix(media.Schema.Ref, "#/components/schemas/"), "the %s %s body is a named schema, not %q", code, ct, media.Schema.Ref)
				}
			}
		})
	}
}
