package hookd_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

// openAPIPath is the API's OpenAPI document, which api.gen.go is
// generated from.
var openAPIPath = filepath.Join(repoRoot, "internal", "api", "openapi.json")

// generateLine is api/generate.go's go:generate command.
var generateLine = regexp.MustCompile(`(?m)^//go:generate (go run \S+@v\S+) -config oapi-codegen.yaml (\S+)$`)

// TestGeneratedClientIsCurrent runs the pinned generator on the document
// as it is now and compares its output with api/api.gen.go: a document
// changed without `go generate ./...` (make sdk) fails here.
func TestGeneratedClientIsCurrent(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("api", "generate.go"))
	require.NoError(t, err)
	m := generateLine.FindSubmatch(src)
	require.NotNil(t, m, "api/generate.go has no go:generate line of the expected form")
	require.Equal(t, filepath.ToSlash(filepath.Join("..", openAPIPath)), string(m[2]), "the generator reads the API's document")

	// The generator writes the configuration's output file beside the
	// configuration: a copy of both in a temporary directory.
	dir := t.TempDir()
	for _, name := range []string{"oapi-codegen.yaml", "overlay.yaml"} {
		b, err := os.ReadFile(filepath.Join("api", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	doc, err := filepath.Abs(openAPIPath)
	require.NoError(t, err)
	args := append(strings.Fields(string(m[1])), "-config", "oapi-codegen.yaml", doc)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	want, err := os.ReadFile(filepath.Join(dir, "api.gen.go"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("api", "api.gen.go"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "api/api.gen.go is stale: run `go generate ./...` in sdk/go (or `make sdk`)")
}

// operation is one operation of the document.
type operation struct {
	id    string
	paged bool // takes an `after` cursor
}

func documentOperations(t *testing.T) []operation {
	t.Helper()
	b, err := os.ReadFile(openAPIPath)
	require.NoError(t, err)
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	var ops []operation
	for _, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				OperationID string `json:"operationId"`
				Parameters  []struct {
					Ref  string `json:"$ref"`
					Name string `json:"name"`
					In   string `json:"in"`
				} `json:"parameters"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			require.NotEmpty(t, op.OperationID, "an operation without an operationId")
			o := operation{id: op.OperationID}
			for _, p := range op.Parameters {
				if ref, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
					p.Name, p.In = doc.Components.Parameters[ref].Name, doc.Components.Parameters[ref].In
				}
				o.paged = o.paged || (p.In == "query" && p.Name == "after")
			}
			ops = append(ops, o)
		}
	}
	require.NotEmpty(t, ops)
	return ops
}

// TestEveryOperationHasAMethod: each operation of the document has its
// method on the generated client, so an operation dropped or renamed in
// the document without regenerating fails here as well.
func TestEveryOperationHasAMethod(t *testing.T) {
	t.Parallel()
	client := reflect.TypeOf(&api.ClientWithResponses{})
	for _, op := range documentOperations(t) {
		name := strings.ToUpper(op.id[:1]) + op.id[1:] + "WithResponse"
		_, ok := client.MethodByName(name)
		require.True(t, ok, "operation %s has no method %s: run `go generate ./...` in sdk/go", op.id, name)
	}
}

// pagedIterators maps each paged list operation to the iterator of package
// hookd that reads it; a new paged list needs one here.
var pagedIterators = map[string]any{
	"listEndpoints":            (*hookd.EndpointsService).All,
	"listEndpointAttempts":     (*hookd.EndpointsService).Attempts,
	"searchMessages":           (*hookd.MessagesService).All,
	"searchDeliveries":         (*hookd.DeliveriesService).All,
	"listDeliveryAttempts":     (*hookd.DeliveriesService).Attempts,
	"listBreakers":             (*hookd.BreakersService).All,
	"listEventTypes":           (*hookd.EventTypesService).All,
	"listTokens":               (*hookd.TokensService).All,
	"listOperationalEndpoints": (*hookd.OperationalEndpointsService).All,
	"listPortalSessions":       (*hookd.PortalSessionsService).All,
}

// TestEveryPagedListHasAnIterator: every operation that takes an `after`
// cursor has an iterator.
func TestEveryPagedListHasAnIterator(t *testing.T) {
	t.Parallel()
	var paged []string
	for _, op := range documentOperations(t) {
		if op.paged {
			paged = append(paged, op.id)
		}
	}
	slices.Sort(paged)
	var have []string
	for id := range pagedIterators {
		have = append(have, id)
	}
	slices.Sort(have)
	require.Equal(t, paged, have)
}

// TestNoServerDependencies: an application importing the SDK builds none
// of the server's packages or dependencies (tests included here, which an
// importer never builds).
func TestNoServerDependencies(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-test", "./...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/hookd/hookd/sdk/go/api")
	for _, d := range deps {
		for _, banned := range []string{"github.com/jackc/", "github.com/riverqueue/", "github.com/go-chi/"} {
			require.False(t, strings.HasPrefix(d, banned), "the SDK depends on %s", d)
		}
		if strings.HasPrefix(d, "github.com/hookd/hookd/") {
			require.True(t, strings.HasPrefix(d, "github.com/hookd/hookd/sdk/go"), "the SDK imports the server's %s", d)
		}
	}
}
