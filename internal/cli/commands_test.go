package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

// tableHeader requires a table whose first line holds the columns given.
func tableHeader(t *testing.T, out string, cols ...string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.NotEmpty(t, lines)
	for _, c := range cols {
		require.Contains(t, lines[0], c, "the table's header:\n%s", out)
	}
	return lines[1:]
}

// TestCommands runs every subcommand once against the devserver, as an
// admin, with JSON output (decoded and checked against the API) and,
// for the reads, with table output too.
func TestCommands(t *testing.T) {
	t.Parallel()
	tenant := newTenant(t)
	receiver := newOKReceiver(t)
	admin := adminClient(t)
	ctx := testContext(t, 3*time.Minute)
	start := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)

	// endpoints
	secret := newSecret()
	ep := okJSON[hookd.Endpoint](t, "endpoints", "create", "--tenant", tenant, "--url", receiver.URL+"/hooks",
		"--event-type", "cli.*", "--description", "made by the CLI test", "--metadata", "team=ops", "--secret", secret)
	require.Equal(t, tenant, ep.TenantID)
	require.Equal(t, []string{"cli.*"}, ep.EventTypes)
	require.Equal(t, "ops", ep.Metadata["team"])

	list := okJSON[[]hookd.Endpoint](t, "endpoints", "list", "--tenant", tenant)
	require.Len(t, list, 1)
	require.Equal(t, ep.ID, list[0].ID)
	rows := tableHeader(t, ok(t, "endpoints", "list", "--tenant", tenant, "-o", "table").stdout, "ID", "TENANT", "URL", "STATUS")
	require.Len(t, rows, 1)
	require.Contains(t, rows[0], ep.ID)

	got := okJSON[hookd.Endpoint](t, "endpoints", "get", ep.ID)
	require.Equal(t, ep.ID, got.ID)
	tableHeader(t, ok(t, "endpoints", "get", ep.ID, "-o", "table").stdout, "ID", "URL")

	updated := okJSON[hookd.Endpoint](t, "endpoints", "update", ep.ID, "--description", "changed")
	require.Equal(t, "changed", updated.Description)

	disabled := okJSON[hookd.Endpoint](t, "endpoints", "disable", ep.ID)
	require.Equal(t, "disabled", string(disabled.Status))
	enabled := okJSON[hookd.EnabledEndpoint](t, "endpoints", "enable", ep.ID)
	require.Equal(t, "enabled", string(enabled.Status))

	sec := ok(t, "endpoints", "secret", ep.ID, "--json").stdout
	require.Contains(t, sec, secret)
	require.Contains(t, ok(t, "endpoints", "secret", ep.ID, "-o", "table").stdout, secret)
	okJSON[hookd.Endpoint](t, "endpoints", "rotate-secret", ep.ID)
	rotated, err := admin.Endpoints.Secret(ctx, ep.ID)
	require.NoError(t, err)
	require.NotNil(t, rotated.PreviousSecret)
	require.Equal(t, secret, *rotated.PreviousSecret)

	// messages
	sent := okJSON[hookd.MessageAccepted](t, "messages", "send", "--tenant", tenant, "--event-type", "cli.ping", "--payload", `{"n":1}`)
	require.Len(t, sent.Deliveries, 1)
	dlv := sent.Deliveries[0].ID
	msg := okJSON[hookd.Message](t, "messages", "get", sent.ID)
	require.JSONEq(t, `{"n":1}`, string(msg.Payload))
	require.Contains(t, ok(t, "messages", "get", sent.ID, "-o", "table").stdout, `{"n":1}`)
	msgs := okJSON[[]hookd.MessageSummary](t, "messages", "list", "--tenant", tenant, "--event-type", "cli.ping", "--since", start)
	require.Len(t, msgs, 1)
	require.Equal(t, sent.ID, msgs[0].ID)
	tableHeader(t, ok(t, "messages", "list", "--tenant", tenant, "-o", "table").stdout, "ID", "EVENT TYPE")

	// deliveries: wait for the delivery to land, through the CLI.
	require.Eventually(t, func() bool {
		d := okJSON[hookd.Delivery](t, "deliveries", "get", dlv)
		return d.Status == api.DeliveryStatusDelivered
	}, time.Minute, 100*time.Millisecond)
	dls := okJSON[[]hookd.Delivery](t, "deliveries", "list", "--tenant", tenant, "--status", "delivered", "--since", "10m")
	require.Len(t, dls, 1)
	tableHeader(t, ok(t, "deliveries", "list", "--endpoint", ep.ID, "-o", "table").stdout, "ID", "STATUS", "ATTEMPTS")
	tableHeader(t, ok(t, "deliveries", "get", dlv, "-o", "table").stdout, "ID", "STATUS")
	attempts := okJSON[[]hookd.Attempt](t, "deliveries", "attempts", dlv)
	require.Len(t, attempts, 1)
	require.Equal(t, 200, *attempts[0].StatusCode)
	tableHeader(t, ok(t, "deliveries", "attempts", dlv, "-o", "table").stdout, "OUTCOME", "CODE")
	// A delivered delivery is neither retried nor skipped: the API's 409,
	// exit 1 with its title.
	for _, action := range []string{"retry", "skip"} {
		r := hookdRun(t, invocation{}, "deliveries", action, dlv)
		require.Equal(t, 1, r.code, r.String())
		require.Contains(t, r.stderr, "hookd: 409 ", r.String())
	}

	// recover: nothing failed, so the count is 0 and nothing is asked.
	r := hookdRun(t, invocation{}, "recover", ep.ID, "--since", "1h", "-o", "json")
	require.Equal(t, 0, r.code, r.String())
	require.Contains(t, r.stderr, "0 failed deliveries of "+ep.ID)

	// breakers
	brs := okJSON[[]hookd.Breaker](t, "breakers", "list", "--tenant", tenant)
	require.Len(t, brs, 1)
	tableHeader(t, ok(t, "breakers", "list", "--tenant", tenant, "-o", "table").stdout, "ENDPOINT", "STATE")
	require.Equal(t, ep.ID, okJSON[hookd.Breaker](t, "breakers", "get", ep.ID).EndpointID)
	iso := okJSON[hookd.Breaker](t, "breakers", "isolate", ep.ID, "--reason", "cli test")
	require.Equal(t, api.BreakerStateIsolated, iso.State)
	require.Len(t, okJSON[[]hookd.Breaker](t, "breakers", "list", "--tenant", tenant, "--state", "isolated"), 1)
	reset := okJSON[hookd.Breaker](t, "breakers", "reset", ep.ID, "--reason", "cli test done")
	require.Equal(t, api.BreakerStateClosed, reset.State)

	// classes
	classes := okJSON[[]hookd.TrafficClass](t, "classes", "list")
	require.NotEmpty(t, classes)
	tableHeader(t, ok(t, "classes", "list", "-o", "table").stdout, "NAME", "ENFORCE")
	require.Equal(t, "trickle", okJSON[hookd.TrafficClass](t, "classes", "get", "trickle").Name)
	rec := okJSON[hookd.ClassRecommendation](t, "classes", "recommendation", "trickle")
	require.Equal(t, "trickle", rec.Class)
	tableHeader(t, ok(t, "classes", "recommendation", "trickle", "-o", "table").stdout, "CLASS", "STATUS")
	// Queued, and followed until the fleet's tuning leader (the
	// devserver's dispatcher) has run it.
	done := okJSON[hookd.ClassTuneStatus](t, "classes", "tune", "trickle", "--since", "1h", "--wait", "3m")
	require.Equal(t, "trickle", done.Class)
	require.Equal(t, api.ClassTuneStatusStatusDone, done.Status, done.Error)
	status := okJSON[hookd.ClassTuneStatus](t, "classes", "tune-status", "trickle")
	require.Equal(t, done.ID, status.ID)
	tuned := okJSON[hookd.ClassRecommendation](t, "classes", "recommendation", "trickle")
	require.NotNil(t, tuned.RanAt)
	// A proposal is applied once; with none to act on, apply and reject
	// are the API's 409.
	if tuned.Status == api.Proposed {
		applied := okJSON[hookd.ClassRecommendation](t, "classes", "apply", "trickle")
		require.Equal(t, api.Applied, applied.Status)
	}
	for _, action := range []string{"apply", "reject"} {
		r := hookdRun(t, invocation{}, "classes", action, "trickle")
		require.Equal(t, 1, r.code, r.String())
		require.Contains(t, r.stderr, "hookd: 409 ", r.String())
	}

	// tokens
	created := okJSON[hookd.CreatedToken](t, "tokens", "create", "--name", "cli-"+tenant, "--tenant", tenant, "--read-only")
	require.True(t, strings.HasPrefix(created.Token, "hkd_"), created.Token)
	require.True(t, created.ReadOnly)
	tokens := okJSON[[]hookd.Token](t, "tokens", "list", "--limit", "0")
	require.Contains(t, tokenIDs(tokens), created.ID)
	tableHeader(t, ok(t, "tokens", "list", "-o", "table").stdout, "ID", "NAME", "SCOPE")
	tr := ok(t, "tokens", "create", "--name", "cli2-"+tenant, "-o", "table")
	require.True(t, strings.HasPrefix(tr.stdout, "hkd_"), "a table prints the secret alone: %s", tr)
	ok(t, "tokens", "revoke", created.ID)
	for _, tok := range okJSON[[]hookd.Token](t, "tokens", "list", "--limit", "0") {
		if tok.ID == created.ID {
			require.NotNil(t, tok.RevokedAt)
		}
	}

	// portal sessions
	ps := okJSON[hookd.PortalSession](t, "portal-session", "create", tenant, "--read-only", "--expires-in", "10m")
	require.Contains(t, ps.URL, "/portal")
	sessions := okJSON[[]hookd.PortalSessionSummary](t, "portal-session", "list", tenant)
	require.Len(t, sessions, 1)
	tableHeader(t, ok(t, "portal-session", "list", tenant, "-o", "table").stdout, "ID", "STATUS")
	ok(t, "portal-session", "end", ps.ID)
	sessions = okJSON[[]hookd.PortalSessionSummary](t, "portal-session", "list", tenant)
	require.NotNil(t, sessions[0].EndedAt)

	// event types: one made through the API for this test.
	name := "cli." + strings.TrimPrefix(tenant, "cli-")
	_, err = admin.API().CreateEventTypeWithResponse(ctx, api.CreateEventTypeRequest{Name: name, Description: hookd.Ptr("made by the CLI test")})
	require.NoError(t, err)
	ets := okJSON[[]hookd.EventType](t, "event-types", "list", "--limit", "0")
	require.Contains(t, eventTypeNames(ets), name)
	tableHeader(t, ok(t, "event-types", "list", "-o", "table").stdout, "NAME", "DESCRIPTION")
	require.Equal(t, "made by the CLI test", okJSON[hookd.EventType](t, "event-types", "get", name).Description)

	// delete
	ok(t, "endpoints", "delete", ep.ID)
	r = hookdRun(t, invocation{}, "endpoints", "get", ep.ID)
	require.Equal(t, 1, r.code, r.String())
	require.Contains(t, r.stderr, "hookd: 404 ", r.String())
}

// TestRecoverAsksFirst: recover counts the failed deliveries, asks, and
// queues them only on a yes.
func TestRecoverAsksFirst(t *testing.T) {
	t.Parallel()
	tenant := newTenant(t)
	ctx := testContext(t, 3*time.Minute)
	admin := adminClient(t)
	// Nothing listens at port 1 of loopback: every attempt fails.
	ep, err := admin.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: tenant, URL: hookd.Ptr("http://127.0.0.1:1/hooks")})
	require.NoError(t, err)
	for i := range 3 {
		_, err := admin.Messages.Send(ctx, hookd.NewMessage{TenantID: tenant, EventType: "cli.fail", Payload: map[string]int{"i": i}})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		n := 0
		for d, err := range admin.Deliveries.All(ctx, &hookd.DeliveryFilter{EndpointID: &ep.ID, Status: hookd.Ptr("failed")}) {
			require.NoError(t, err)
			_ = d
			n++
		}
		return n == 3
	}, 2*time.Minute, 200*time.Millisecond)

	no := hookdRun(t, invocation{stdin: "n\n"}, "recover", ep.ID, "--since", "1h")
	require.Equal(t, 1, no.code, no.String())
	require.Contains(t, no.stderr, "3 failed deliveries of "+ep.ID)
	require.Contains(t, no.stderr, "not confirmed")

	yes := hookdRun(t, invocation{stdin: "y\n"}, "recover", ep.ID, "--since", "1h", "-o", "json")
	require.Equal(t, 0, yes.code, yes.String())
	var rec hookd.Recovery
	require.NoError(t, json.Unmarshal([]byte(yes.stdout), &rec))
	require.Equal(t, 3, rec.Queued)
}

// TestTenantTokenRefused: a tenant's token reading another tenant's
// endpoint exits 1 with the API's problem.
func TestTenantTokenRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, time.Minute)
	admin := adminClient(t)
	mine, theirs := newTenant(t), newTenant(t)
	tok, err := admin.Tokens.Create(ctx, hookd.CreateTokenRequest{Name: "cli-" + mine, TenantID: &mine})
	require.NoError(t, err)
	ep, err := admin.Endpoints.Create(ctx, hookd.CreateEndpointRequest{TenantID: theirs, URL: hookd.Ptr("http://127.0.0.1:1/hooks")})
	require.NoError(t, err)
	env := map[string]string{"HOOKD_API": server.API, "HOOKD_TOKEN": tok.Token}

	// Another tenant's object is not found, as a missing one; naming
	// another tenant is forbidden, with the field at fault.
	notFound := "hookd: 404 Not Found\n  not found\n"
	forbidden := "hookd: 403 Forbidden\n  this token may only name its own tenant\n  tenant_id: names another tenant than the token's\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"endpoints", "get", ep.ID}, notFound},
		{[]string{"endpoints", "disable", ep.ID}, notFound},
		{[]string{"endpoints", "list", "--tenant", theirs}, forbidden},
		{[]string{"messages", "send", "--tenant", theirs, "--event-type", "cli.x"}, forbidden},
	} {
		r := hookdRun(t, invocation{env: env}, tc.args...)
		require.Equal(t, 1, r.code, "%v: %s", tc.args, r)
		require.Equal(t, tc.want, r.stderr, "%v: the problem's status, title, detail and fields", tc.args)
		require.Empty(t, r.stdout)
	}
	// The field at fault is named when the API names it.
	r := hookdRun(t, invocation{}, "endpoints", "create", "--tenant", mine, "--url", "not a url")
	require.Equal(t, 1, r.code, r.String())
	require.Contains(t, r.stderr, "hookd: 400 ")
	require.Contains(t, r.stderr, "  url: ", r.String())
	// The endpoint is untouched.
	got, err := admin.Endpoints.Get(ctx, ep.ID)
	require.NoError(t, err)
	require.Equal(t, "enabled", string(got.Status))
}

// TestUsageErrors: every bad command line exits 2 with a message, before
// any call to the API.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "a command is needed"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"endpoints"}, "needs a subcommand"},
		{[]string{"endpoints", "bogus"}, `unknown command "bogus"`},
		{[]string{"endpoints", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"endpoints", "get"}, "takes 1 argument"},
		{[]string{"endpoints", "get", "a", "b"}, "takes 1 argument"},
		{[]string{"endpoints", "create", "--url", "http://x"}, "needs --tenant and --url"},
		{[]string{"endpoints", "update", "ep_x"}, "needs a field to change"},
		{[]string{"endpoints", "list", "--limit", "many"}, "invalid argument"},
		{[]string{"endpoints", "list", "-o", "yaml"}, "--output is table or json"},
		{[]string{"messages", "send", "--tenant", "a", "--event-type", "b", "--payload", "{"}, "--payload is not valid JSON"},
		{[]string{"messages", "list", "--since", "yesterday"}, "neither an RFC 3339 time nor a duration"},
		{[]string{"breakers", "list", "--state", "ajar"}, "--state is closed, open, half_open or isolated"},
		{[]string{"tail", "--status", "lost"}, `--status "lost" is not a delivery status`},
		{[]string{"recover", "ep_x"}, "recover needs --since"},
		{[]string{"listen"}, "listen needs --tenant"},
		{[]string{"listen", "--tenant", "a", "--forward", "ftp://x"}, "is not an http(s) URL"},
		{[]string{"login"}, "login needs --api"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			t.Parallel()
			// No API to reach: a usage error must not need one.
			r := hookdRun(t, invocation{env: map[string]string{}}, tc.args...)
			require.Equal(t, 2, r.code, r.String())
			require.Contains(t, r.stderr, tc.want, r.String())
		})
	}
}

// TestLogin: login checks the token, stores it 0600, and later commands
// use it; HOOKD_API and HOOKD_TOKEN override the file.
func TestLogin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := hookdRun(t, invocation{env: map[string]string{}, configDir: dir, stdin: server.Token + "\n"}, "login", "--api", server.API)
	require.Equal(t, 0, r.code, r.String())
	path := filepath.Join(dir, "hookd", "config.json")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), server.Token)

	for _, tc := range []struct {
		name string
		env  map[string]string
		code int
		want string
	}{
		{"the file alone", map[string]string{}, 0, ""},
		{"HOOKD_API overrides the file", map[string]string{"HOOKD_API": "http://127.0.0.1:1"}, 1, "127.0.0.1:1"},
		{"HOOKD_TOKEN overrides the file", map[string]string{"HOOKD_TOKEN": "hkd_not_a_token"}, 1, "hookd: 401 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := hookdRun(t, invocation{env: tc.env, configDir: dir}, "event-types", "list", "--limit", "1")
			require.Equal(t, tc.code, r.code, r.String())
			require.Contains(t, r.stderr, tc.want)
		})
	}

	// A wrong token is refused at login, and nothing is stored.
	other := t.TempDir()
	r = hookdRun(t, invocation{env: map[string]string{}, configDir: other, stdin: "hkd_wrong\n"}, "login", "--api", server.API)
	require.Equal(t, 1, r.code, r.String())
	require.Contains(t, r.stderr, "hookd: 401 ")
	_, err = os.Stat(filepath.Join(other, "hookd", "config.json"))
	require.ErrorIs(t, err, os.ErrNotExist)

	// Not logged in at all: a clear error.
	r = hookdRun(t, invocation{env: map[string]string{}, configDir: t.TempDir()}, "endpoints", "list")
	require.Equal(t, 1, r.code, r.String())
	require.Contains(t, r.stderr, "not logged in")
}

func tokenIDs(ts []hookd.Token) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func eventTypeNames(es []hookd.EventType) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}
