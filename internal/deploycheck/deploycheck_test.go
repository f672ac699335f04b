//go:build !race

package deploycheck_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"

	"github.com/hookd/hookd/internal/deploycheck"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestArgvFollowsContainerRules(t *testing.T) {
	t.Parallel()
	ep, cmd := []string{"/entry"}, []string{"default"}
	require.Equal(t, []string{"/entry", "default"}, deploycheck.Argv(ep, cmd, nil, nil))
	require.Equal(t, []string{"/entry", "x"}, deploycheck.Argv(ep, cmd, nil, []string{"x"}))
	require.Equal(t, []string{"/other"}, deploycheck.Argv(ep, cmd, []string{"/other"}, nil), "an entrypoint drops the image's CMD")
}

const dockerfile = `# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
ENV CGO_ENABLED=0
RUN go build -o /out/ \
    ./cmd/tool

FROM gcr.io/distroless/static-debian12:nonroot AS extra
COPY --from=build /out/tool /bin/tool
ENTRYPOINT exec tool

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tool /usr/local/bin/
USER nonroot:nonroot
CMD ["tool", "serve"]
`

func TestDockerfileImages(t *testing.T) {
	t.Parallel()
	df, err := deploycheck.ParseDockerfile(dockerfile)
	require.NoError(t, err)
	img, err := df.Image("")
	require.NoError(t, err)
	require.Equal(t, []string{"tool", "serve"}, img.Cmd)
	require.Equal(t, map[string]string{"tool": "/usr/local/bin/tool"}, img.Holds)
	require.Equal(t, "tool", img.Program())
	require.Empty(t, deploycheck.CheckImage(df, "", "./cmd/tool", "tool"))

	extra, err := df.Image("extra")
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/sh", "-c", "exec tool"}, extra.Entrypoint, "a shell form runs under /bin/sh -c")
	_, err = extra.Find("/usr/local/bin/tool")
	require.ErrorContains(t, err, "runs /usr/local/bin/tool, but the image holds it at /bin/tool")
	_, err = img.Find("other")
	require.ErrorContains(t, err, `runs "other", which the image does not hold`)
	require.ErrorContains(t, errors.Join(deploycheck.CheckImage(df, "extra", "./cmd/tool", "tool")...), "must set a non-root USER")
	_, err = df.Image("missing")
	require.ErrorContains(t, err, `no stage "missing"`)

	cgo, err := deploycheck.ParseDockerfile(strings.Replace(dockerfile, "ENV CGO_ENABLED=0\n", "", 1))
	require.NoError(t, err)
	require.ErrorContains(t, cgo.Builds("./cmd/tool"), "builds ./cmd/tool without CGO_ENABLED=0")
	require.ErrorContains(t, df.Builds("./cmd/other"), "no build stage runs go build on ./cmd/other")
}

func TestComposeInterpolatesLikeCompose(t *testing.T) {
	t.Parallel()
	df, err := deploycheck.ParseDockerfile(dockerfile)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "compose.yml")
	text := `
x-tool: &tool
  build: .
services:
  serve:
    <<: *tool
    environment:
      GRACE: ${GRACE:-5s}
      TOKEN: ${TOKEN:?set TOKEN}
  other:
    image: postgres:15
`
	require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
	p, err := deploycheck.LoadCompose(file, nil, map[string]string{"TOKEN": "t"})
	require.NoError(t, err)
	runs, errs := deploycheck.ComposeRuns(p, df)
	require.Empty(t, errs)
	require.Len(t, runs, 1, "only services built from the Dockerfile")
	require.Equal(t, "tool", runs[0].Program)
	require.Equal(t, []string{"serve"}, runs[0].Args, "the image's CMD")
	require.Equal(t, map[string]string{"GRACE": "5s", "TOKEN": "t"}, runs[0].Env)

	_, err = deploycheck.LoadCompose(file, nil, nil)
	require.ErrorContains(t, err, "set TOKEN")
}

func TestWorkloadsCountRollouts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata: {name: plain}
spec:
  replicas: 4
  selector: {matchLabels: {app: plain}}
  template:
    metadata: {labels: {app: plain}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: recreate}
spec:
  replicas: 3
  strategy: {type: Recreate}
  selector: {matchLabels: {app: r}}
  template:
    metadata: {labels: {app: r}}
    spec: {containers: [{name: c, image: x}]}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(manifest), 0o644))
	k, err := deploycheck.LoadK8s(dir, nil)
	require.NoError(t, err)
	ws, err := k.Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 2)
	require.Equal(t, 4+2*1+1, ws[0].Pods, "25% of 4: a surge of 1 and 1 unavailable")
	require.Equal(t, 3, ws[1].Pods, "Recreate stops the old pods first")

	_, err = deploycheck.LoadK8s(dir, func(_, text string) string { return strings.Replace(text, "kind: Deployment", "kind: StatefulSet", 1) })
	require.ErrorContains(t, err, "kind StatefulSet: add its API type to deploycheck")
}

func TestSelectors(t *testing.T) {
	t.Parallel()
	sels, err := deploycheck.Selectors(`sum by (endpoint) (rate(a_total{outcome="failure"}[5m])) / on (endpoint) max_over_time({__name__="b", job="x"}[1h:1m])`)
	require.NoError(t, err)
	require.Equal(t, []deploycheck.Selector{
		{Metric: "a_total", Labels: []string{"outcome"}},
		{Metric: "b", Labels: []string{"job"}},
	}, sels)
	_, err = deploycheck.Selectors(`{job="x"}`)
	require.ErrorContains(t, err, "without a metric name")

	s, err := deploycheck.SeriesSelector(`a_total{endpoint="e",outcome="success"}`)
	require.NoError(t, err)
	require.Equal(t, deploycheck.Selector{Metric: "a_total", Labels: []string{"endpoint", "outcome"}}, s)

	exported := func(name string) ([]string, bool) { return []string{"endpoint"}, name == "a_total" }
	errs := errors.Join(deploycheck.CheckSelectors(append(sels, s), exported)...)
	require.ErrorContains(t, errs, "a_total has no label outcome")
	require.ErrorContains(t, errs, "b is not a series hookd exports")
	require.NotContains(t, errs.Error(), "no label job", "job is a target label")
}

func TestSecretRef(t *testing.T) {
	t.Parallel()
	c := corev1.Container{Env: []corev1.EnvVar{
		{Name: "PLAIN", Value: "x"},
		{Name: "FROM_MAP", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "m"}, Key: "k"}}},
		{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "K"}}},
	}}
	secret, key, ok := deploycheck.SecretRef(c, "KEY")
	require.True(t, ok)
	require.Equal(t, []string{"s", "K"}, []string{secret, key})
	for _, name := range []string{"PLAIN", "FROM_MAP", "MISSING"} {
		_, _, ok := deploycheck.SecretRef(c, name)
		require.False(t, ok, name)
	}
}
