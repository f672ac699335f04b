//go:build !race

package main

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/deploycheck"
	"github.com/hookd/hookd/internal/dispatcher"
)

// k8sManifests loads deploy/k8s, each file's text passed through edit
// first when edit is not nil.
func k8sManifests(t *testing.T, edit func(file, text string) string) *deploycheck.K8s {
	t.Helper()
	k, err := deploycheck.LoadK8s("../../deploy/k8s", edit)
	require.NoError(t, err)
	return k
}

func TestK8sManifestsRunRealFlags(t *testing.T) {
	t.Parallel()
	k := k8sManifests(t, nil)
	containers, errs := deploycheck.CheckK8s(k, loadDockerfile(t), binary(), dispatcherPorts)
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []string{"Deployment/hookd-dispatcher/dispatcher"}, containers)
	require.ElementsMatch(t, k.Files, k.Kustomization.Resources, "kustomization.yaml lists every manifest")
}

func TestK8sCheckFailsOnRenames(t *testing.T) {
	t.Parallel()
	df := loadDockerfile(t)
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
		"a Secret without SECRET_KEY": {
			edit: replace("secret.yaml", "  SECRET_KEY:", "  SECRET:"),
			want: "Deployment/hookd-dispatcher/dispatcher: env SECRET_KEY: Secret hookd has no key SECRET_KEY",
		},
		"a ConfigMap that is not there": {
			edit: replace("dispatcher.yaml", "name: hookd-dispatcher\n          env:", "name: hookd-dispatch\n          env:"),
			want: "ConfigMap hookd-dispatch is not among the manifests",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, errs := deploycheck.CheckK8s(k8sManifests(t, tc.edit), df, binary(), dispatcherPorts)
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
}

// Connection budget of deploy/k8s, as deploy/k8s/config.yaml documents it:
// PostgreSQL's default max_connections, less its 3
// superuser_reserved_connections and 10 left for psql, backups and
// monitoring.
const (
	maxConnections    = 100
	reservedSuperuser = 3
	operatorHeadroom  = 10
)

// podConnections returns the most Postgres connections one container of
// the manifests can hold: a dispatcher its pool and its LISTEN connection; any other hookd container (the
// api, api migrate) its pool, which the manifests must set: the api's
// default is not known here.
func podConnections(t *testing.T, k *deploycheck.K8s, w deploycheck.Workload) (int, string) {
	t.Helper()
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	defaults := map[string]string{}
	for _, f := range fs.Flags() {
		defaults[f.Env] = f.Default
	}
	img, err := loadDockerfile(t).Image("")
	require.NoError(t, err)
	total, parts := 0, []string{}
	for _, c := range w.Template.Spec.Containers {
		argv := deploycheck.Argv(img.Entrypoint, img.Cmd, c.Command, c.Args)
		require.NotEmpty(t, argv, "%s/%s runs nothing", w.Ref, c.Name)
		env, errs := k.Env(c)
		require.NoError(t, errors.Join(errs...))
		get := func(name string, def bool) int {
			v, ok := env[name]
			if !ok && def {
				v, ok = defaults[name]
			}
			require.True(t, ok, "%s/%s: set %s explicitly, so the connection budget can be computed", w.Ref, c.Name, name)
			n, err := strconv.Atoi(v)
			require.NoError(t, err, "%s/%s: %s", w.Ref, c.Name, name)
			return n
		}
		if path.Base(argv[0]) == "dispatcher" {
			_, ok := env["TRIAL_POOL_SIZE"]
			require.False(t, ok, "%s/%s: TRIAL_POOL_SIZE is deprecated and ignored", w.Ref, c.Name)
			pool := get("DB_MAX_CONNS", true)
			total += pool + 1 + dispatcher.LedgerConns
			parts = append(parts, fmt.Sprintf("%s: %d pool + 1 listener + %d ledger", c.Name, pool, dispatcher.LedgerConns))
			continue
		}
		pool := get("DB_MAX_CONNS", false)
		total += pool
		parts = append(parts, fmt.Sprintf("%s: %d pool", c.Name, pool))
	}
	return total, strings.Join(parts, ", ")
}

// TestK8sConnectionsFitMaxConnections sums, over every workload of
// deploy/k8s, the pods a rollout can run at once times the connections
// each can hold, and compares the sum with the documented budget.
func TestK8sConnectionsFitMaxConnections(t *testing.T) {
	t.Parallel()
	sum := func(k *deploycheck.K8s) (int, string) {
		ws, err := k.Workloads()
		require.NoError(t, err)
		total := 0
		var lines []string
		for _, w := range ws {
			per, how := podConnections(t, k, w)
			total += w.Pods * per
			lines = append(lines, fmt.Sprintf("%s: %d pods x %d (%s)", w.Ref, w.Pods, per, how))
		}
		return total, strings.Join(lines, "\n")
	}
	budget := maxConnections - reservedSuperuser - operatorHeadroom
	total, how := sum(k8sManifests(t, nil))
	t.Logf("peak connections %d of %d:\n%s", total, budget, how)
	require.LessOrEqual(t, total, budget, "deploy/k8s can hold more Postgres connections than its budget:\n%s", how)

	// The sum counts rollouts: a surge on the dispatchers would break it.
	over, how := sum(k8sManifests(t, func(file, text string) string {
		if file != "dispatcher.yaml" {
			return text
		}
		return strings.Replace(text, "maxSurge: 0", "maxSurge: 1", 1)
	}))
	require.Greater(t, over, budget, "a dispatcher surge must not fit:\n%s", how)
}
