package deploy_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
)

const testDockerfile = `# syntax=docker/dockerfile:1
ARG GO=1.26
FROM golang:1.26 AS build
ENV CGO_ENABLED=0
RUN go build -o /out/ \
    ./cmd/tool \
    ./cmd/other

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tool /out/other /usr/local/bin/
USER nonroot:nonroot
CMD ["tool", "serve"]
`

const testCompose = `
x-img: &img
  build: .
  image: t:local
x-db: &db
  DATABASE_URL: postgres://db/x
services:
  db:
    image: postgres:15
    environment: [POSTGRES_PASSWORD=x]
  serve:
    <<: *img
    command: tool serve --port 80
    environment:
      <<: *db
      GRACE: ${GRACE:-5s}
  listed:
    <<: *img
    command: ["tool", "migrate"]
    environment: [DATABASE_URL=postgres://db/x]
  other:
    <<: *img
    command: ["other"]
`

// tool is a fake binary: subcommands serve and migrate, flags --port and
// --grace, each with a twin, and --database-url.
func tool(t *testing.T, seen *[][]string) deploy.Binary {
	return deploy.Binary{
		Name:    "tool",
		Package: "./cmd/tool",
		Flags:   map[string]string{"--port": "PORT", "--grace": "GRACE", "--database-url": "DATABASE_URL"},
		Check: func(args []string, getenv func(string) string) error {
			if seen != nil {
				*seen = append(*seen, append(slices.Clone(args), "GRACE="+getenv("GRACE")))
			}
			if len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "serve" && args[0] != "migrate" {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			if g := getenv("GRACE"); g != "" && !strings.HasSuffix(g, "s") {
				return errors.New("GRACE: not a duration")
			}
			return nil
		},
	}
}

func TestParseDockerfile(t *testing.T) {
	t.Parallel()
	df, err := deploy.ParseDockerfile(testDockerfile)
	require.NoError(t, err)
	require.Len(t, df.Stages, 2)
	require.Equal(t, "build", df.Stages[0].Name)
	require.Equal(t, "golang:1.26", df.Stages[0].From)
	require.Equal(t, "0", df.Stages[0].Env()["CGO_ENABLED"])
	run := df.Stages[0].Instructions[1]
	require.Equal(t, "RUN", run.Keyword)
	require.Equal(t, 5, run.Line)
	require.Equal(t, []string{"go", "build", "-o", "/out/", "./cmd/tool", "./cmd/other"}, strings.Fields(run.Args))

	require.Equal(t, map[string]string{"tool": "/usr/local/bin/tool", "other": "/usr/local/bin/other"}, df.Final().Binaries())
	ep, cmd, err := df.Defaults()
	require.NoError(t, err)
	require.Empty(t, ep)
	require.Equal(t, []string{"tool", "serve"}, cmd)
}

func TestParseDockerfileShellFormAndErrors(t *testing.T) {
	t.Parallel()
	df, err := deploy.ParseDockerfile("FROM x\nENTRYPOINT exec tool\n")
	require.NoError(t, err)
	ep, _, err := df.Defaults()
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/sh", "-c", "exec tool"}, ep)

	_, err = deploy.ParseDockerfile("RUN true\n")
	require.ErrorContains(t, err, "RUN before FROM")
	_, err = deploy.ParseDockerfile("# nothing\n")
	require.ErrorContains(t, err, "no FROM")
}

func TestParseComposeForms(t *testing.T) {
	t.Parallel()
	c, err := deploy.ParseCompose([]byte(testCompose))
	require.NoError(t, err)
	require.Len(t, c.Services, 4)
	require.False(t, c.Services["db"].Built())
	require.Equal(t, map[string]string{"POSTGRES_PASSWORD": "x"}, map[string]string(c.Services["db"].Environment))

	serve := c.Services["serve"]
	require.True(t, serve.Built(), "the merge key brings build")
	require.Equal(t, []string{"tool", "serve", "--port", "80"}, []string(serve.Command))
	require.Equal(t, map[string]string{"DATABASE_URL": "postgres://db/x", "GRACE": "${GRACE:-5s}"}, map[string]string(serve.Environment))
	require.Equal(t, []string{"tool", "migrate"}, []string(c.Services["listed"].Command))
}

func TestServiceArgvFollowsComposeRules(t *testing.T) {
	t.Parallel()
	ep, cmd := []string{"/entry"}, []string{"default"}
	require.Equal(t, []string{"/entry", "default"}, deploy.Service{}.Argv(ep, cmd))
	require.Equal(t, []string{"/entry", "x"}, deploy.Service{Command: []string{"x"}}.Argv(ep, cmd))
	require.Equal(t, []string{"/other"}, deploy.Service{Entrypoint: []string{"/other"}}.Argv(ep, cmd))
}

func TestCheckComposeAcceptsConsistentManifests(t *testing.T) {
	t.Parallel()
	df, err := deploy.ParseDockerfile(testDockerfile)
	require.NoError(t, err)
	c, err := deploy.ParseCompose([]byte(testCompose))
	require.NoError(t, err)

	var seen [][]string
	services, errs := deploy.CheckCompose(c, df, tool(t, &seen))
	require.Empty(t, errs)
	require.Equal(t, []string{"listed", "serve"}, services)
	require.Equal(t, [][]string{{"migrate", "GRACE="}, {"serve", "--port", "80", "GRACE=5s"}}, seen,
		"the binary checks each command with the compose default of each variable")
	require.Empty(t, deploy.CheckDockerfile(df, tool(t, nil)))
}

func TestCheckComposeCatchesRenames(t *testing.T) {
	t.Parallel()
	df, err := deploy.ParseDockerfile(testDockerfile)
	require.NoError(t, err)

	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown environment variable", "GRACE: ${GRACE:-5s}", "GRACE_PERIOD: 5s", "environment variable GRACE_PERIOD is not the twin of any tool flag"},
		{"unknown flag", "--port 80", "--listen 80", "--listen is not one of tool's flags"},
		{"unknown subcommand", `["tool", "migrate"]`, `["tool", "migrations"]`, `unexpected argument "migrations"`},
		{"bad value", "${GRACE:-5s}", "5", "GRACE: not a duration"},
		{"program not in the image", `["other"]`, `["others"]`, `service other: runs "others", which the image does not hold`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, testCompose, tc.from)
			c, err := deploy.ParseCompose([]byte(strings.Replace(testCompose, tc.from, tc.to, 1)))
			require.NoError(t, err)
			_, errs := deploy.CheckCompose(c, df, tool(t, nil))
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
}

func TestCheckComposeFlagRenamedInCode(t *testing.T) {
	t.Parallel()
	df, err := deploy.ParseDockerfile(testDockerfile)
	require.NoError(t, err)
	c, err := deploy.ParseCompose([]byte(testCompose))
	require.NoError(t, err)

	renamed := tool(t, nil)
	renamed.Flags = map[string]string{"--listen-port": "LISTEN_PORT", "--grace": "GRACE_PERIOD", "--database-url": "DATABASE_URL"}
	_, errs := deploy.CheckCompose(c, df, renamed)
	require.ErrorContains(t, errors.Join(errs...), "environment variable GRACE is not the twin of any tool flag")
	require.ErrorContains(t, errors.Join(errs...), "--port is not one of tool's flags")
}

func TestCheckDockerfileCatchesMistakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"package not built", "./cmd/tool \\\n", "\\\n", "no build stage runs go build on ./cmd/tool"},
		{"cgo on", "ENV CGO_ENABLED=0\n", "", "without CGO_ENABLED=0"},
		{"binary not copied", "/out/tool /out/other", "/out/other", "the final stage does not copy the tool binary"},
		{"root", "USER nonroot:nonroot", "USER root", "non-root USER"},
		{"no user", "USER nonroot:nonroot\n", "", "non-root USER"},
		{"unknown program", `CMD ["tool", "serve"]`, `CMD ["tools", "serve"]`, `runs "tools", which the image does not hold`},
		{"wrong path", `CMD ["tool", "serve"]`, `CMD ["/bin/tool", "serve"]`, "runs /bin/tool, but the image holds it at /usr/local/bin/tool"},
		{"bad subcommand", `CMD ["tool", "serve"]`, `CMD ["tool", "sevre"]`, `unexpected argument "sevre"`},
		{"no command", `CMD ["tool", "serve"]`, ``, "no ENTRYPOINT or CMD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, testDockerfile, tc.from)
			df, err := deploy.ParseDockerfile(strings.Replace(testDockerfile, tc.from, tc.to, 1))
			require.NoError(t, err)
			require.ErrorContains(t, errors.Join(deploy.CheckDockerfile(df, tool(t, nil))...), tc.want)
		})
	}
}
