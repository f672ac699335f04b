package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
)

// The dispatcher's metrics address serves /healthz and /readyz too.
var dispatcherPorts = deploy.K8sPorts{Health: "--metrics-addr", Metrics: "--metrics-addr"}

// k8sManifests loads deploy/k8s, each file's text passed through edit
// first when edit is not nil.
func k8sManifests(t *testing.T, edit func(file, text string) string) []deploy.K8sObject {
	t.Helper()
	files, err := filepath.Glob("../../deploy/k8s/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var objs []deploy.K8sObject
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := string(b)
		if edit != nil {
			text = edit(filepath.Base(f), text)
		}
		o, err := deploy.ParseK8s(filepath.Base(f), []byte(text))
		require.NoError(t, err)
		objs = append(objs, o...)
	}
	return objs
}

func TestK8sManifestsUseRealFlags(t *testing.T) {
	t.Parallel()
	_, df := loadManifests(t)
	objs := k8sManifests(t, nil)
	containers, errs := deploy.CheckK8sContainers(objs, df, binary(), dispatcherPorts)
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []string{"Deployment/hookd-dispatcher/dispatcher"}, containers)
	for _, o := range objs {
		if o.Ref() == "Deployment/hookd-dispatcher" {
			require.Equal(t, 3, *o.Spec.Replicas, "three dispatchers")
		}
	}
}

func TestK8sManifestCheckFailsOnRenames(t *testing.T) {
	t.Parallel()
	_, df := loadManifests(t)
	replace := func(file, old, new string) func(string, string) string {
		return func(f, text string) string {
			if f != file {
				return text
			}
			require.Contains(t, text, old)
			return strings.Replace(text, old, new, 1)
		}
	}
	for name, tc := range map[string]struct {
		edit func(file, text string) string
		want string
	}{
		"ConfigMap key renamed": {
			edit: replace("config.yaml", "WORKERS:", "WORKER_COUNT:"),
			want: "Deployment/hookd-dispatcher/dispatcher: environment variable WORKER_COUNT is not the twin of any dispatcher flag",
		},
		"an api setting given to the dispatcher": {
			edit: replace("dispatcher.yaml", "                  key: DATABASE_URL\n", "                  key: DATABASE_URL\n            - name: API_TOKEN\n              value: x\n"),
			want: "environment variable API_TOKEN is not the twin of any dispatcher flag",
		},
		"subcommand misspelt": {
			edit: replace("dispatcher.yaml", `args: ["run"]`, `args: ["serve"]`),
			want: `unexpected argument "serve"`,
		},
		"bad value": {
			edit: replace("config.yaml", `SHUTDOWN_GRACE: "30s"`, `SHUTDOWN_GRACE: "30"`),
			want: `SHUTDOWN_GRACE="30": must be a Go duration`,
		},
		"probe on another port than the metrics address": {
			edit: replace("config.yaml", `METRICS_ADDR: "0.0.0.0:9090"`, `METRICS_ADDR: "0.0.0.0:9100"`),
			want: "readinessProbe probes port 9090, but dispatcher serves /readyz on port 9100",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, errs := deploy.CheckK8sContainers(k8sManifests(t, tc.edit), df, binary(), dispatcherPorts)
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
}
