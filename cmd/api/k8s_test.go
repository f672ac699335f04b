//go:build !race

package main

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/hookd/hookd/internal/deploycheck"
	"github.com/hookd/hookd/internal/secretbox"
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
	containers, errs := deploycheck.CheckK8s(k8sManifests(t, nil), loadDockerfile(t), binary(), apiPorts)
	require.NoError(t, errors.Join(errs...))
	require.ElementsMatch(t, []string{"Deployment/hookd-api/api", "Job/hookd-migrate/migrate"}, containers)
}

// TestK8sAPIReplicasShareTheSessionKey: with more than one api pod, a
// dashboard login or a portal change made on one must be valid on the
// others, so every pod reads SESSION_KEY from the same Secret (left empty
// with no SECRET_KEY, each process would pick random keys), and REPLICAS
// tells the api how many pods there are, so that it refuses to start
// without a shared key.
func TestK8sAPIReplicasShareTheSessionKey(t *testing.T) {
	t.Parallel()
	k := k8sManifests(t, nil)
	i := slices.IndexFunc(k.Deployments, func(d appsv1.Deployment) bool { return d.Name == "hookd-api" })
	require.GreaterOrEqual(t, i, 0)
	d := k.Deployments[i]
	require.Greater(t, *d.Spec.Replicas, int32(1), "the check matters with replicas")
	for _, c := range d.Spec.Template.Spec.Containers {
		require.True(t, deploycheck.FromSecret(c, "SESSION_KEY"), "container %s: SESSION_KEY must come from a Secret shared by every replica", c.Name)
		env, errs := k.Env(c)
		require.NoError(t, errors.Join(errs...))
		require.NotEmpty(t, env["SESSION_KEY"])
		require.Equal(t, strconv.Itoa(int(*d.Spec.Replicas)), env["REPLICAS"], "container %s: REPLICAS is the Deployment's replicas", c.Name)
	}
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
			edit: replace("config.yaml", "LISTEN_ADDR:", "LISTEN_ADDRESS:"),
			want: "Deployment/hookd-api/api: environment variable LISTEN_ADDRESS is not the twin of any api flag",
		},
		"subcommand misspelt": {
			edit: replace("migrate-job.yaml", `args: ["migrate"]`, `args: ["migrations"]`),
			want: `Job/hookd-migrate/migrate: api ["migrations"]: unexpected argument "migrations"`,
		},
		"unknown flag": {
			edit: replace("api.yaml", `args: ["serve"]`, `args: ["serve", "--listen=:8080"]`),
			want: "Deployment/hookd-api/api: --listen is not one of api's flags",
		},
		"bad value": {
			edit: replace("config.yaml", `DB_MAX_CONNS: "6"`, `DB_MAX_CONNS: "six"`),
			want: `DB_MAX_CONNS="six": must be an integer`,
		},
		"a Secret without the key an env reads": {
			edit: replace("secret.yaml", "  SESSION_KEY:", "  SESSION:"),
			want: "Deployment/hookd-api/api: env SESSION_KEY: Secret hookd has no key SESSION_KEY",
		},
		"a Secret without SECRET_KEY": {
			edit: replace("secret.yaml", "  SECRET_KEY:", "  SECRET:"),
			want: "Deployment/hookd-api/api: env SECRET_KEY: Secret hookd has no key SECRET_KEY",
		},
		"an image the kustomization does not set": {
			edit: replace("api.yaml", "image: hookd/hookd", "image: hookd:local"),
			want: `Deployment/hookd-api/api: runs api from image "hookd:local", which kustomization.yaml's images do not set`,
		},
		"probe on the wrong port": {
			edit: replace("config.yaml", `LISTEN_ADDR: "0.0.0.0:8080"`, `LISTEN_ADDR: "0.0.0.0:8000"`),
			want: "livenessProbe probes port 8080, but api serves /healthz on port 8000",
		},
		"probe on the wrong path": {
			edit: replace("api.yaml", "path: /readyz", "path: /ready"),
			want: "readinessProbe GETs /ready, want /readyz",
		},
		"listening on loopback": {
			edit: replace("config.yaml", `LISTEN_ADDR: "0.0.0.0:8080"`, `LISTEN_ADDR: "127.0.0.1:8080"`),
			want: `--listen-addr: "127.0.0.1:8080" listens on loopback`,
		},
		"metrics address left at its default": {
			edit: replace("config.yaml", `  METRICS_ADDR: "0.0.0.0:9091"`+"\n", ""),
			want: "--metrics-addr (METRICS_ADDR) must be set",
		},
		"scrape annotation on another port": {
			edit: replace("api.yaml", `prometheus.io/port: "9091"`, `prometheus.io/port: "9090"`),
			want: "prometheus.io/port is 9090, but api serves /metrics on port 9091",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, errs := deploycheck.CheckK8s(k8sManifests(t, tc.edit), df, binary(), apiPorts)
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
	t.Run("a misspelt field", func(t *testing.T) {
		t.Parallel()
		_, err := deploycheck.LoadK8s("../../deploy/k8s", replace("api.yaml", "readinessProbe:", "readinesProbe:"))
		require.ErrorContains(t, err, `api.yaml: error unmarshaling JSON: while decoding JSON: json: unknown field "readinesProbe"`)
	})
	t.Run("flag renamed in the code", func(t *testing.T) {
		t.Parallel()
		b := binary()
		require.Equal(t, "LISTEN_ADDR", b.Flags["--listen-addr"])
		delete(b.Flags, "--listen-addr")
		b.Flags["--listen-address"] = "LISTEN_ADDRESS"
		_, errs := deploycheck.CheckK8s(k8sManifests(t, nil), df, b, deploycheck.Ports{Health: "--listen-address", Metrics: "--metrics-addr"})
		require.ErrorContains(t, errors.Join(errs...), "Deployment/hookd-api/api: environment variable LISTEN_ADDR is not the twin of any api flag")
	})
}

// TestK8sSecretKeyIsSharedFromTheSecret: what the api seals (endpoint
// signing secrets, header values) every dispatcher must open, so the api
// and dispatcher containers all read SECRET_KEY from one key of one
// Secret, and that Secret holds it; the migrate Job opens nothing sealed
// and is given none. The placeholder is not a key, so a pod started with
// it stops rather than storing secrets in plain text.
func TestK8sSecretKeyIsSharedFromTheSecret(t *testing.T) {
	t.Parallel()
	k := k8sManifests(t, nil)
	type ref struct{ secret, key string }
	refs := map[string]ref{}
	for _, d := range k.Deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			secret, key, ok := deploycheck.SecretRef(c, "SECRET_KEY")
			require.True(t, ok, "Deployment/%s/%s: SECRET_KEY must come from a Secret", d.Name, c.Name)
			refs[d.Name+"/"+c.Name] = ref{secret, key}
			env, errs := k.Env(c)
			require.NoError(t, errors.Join(errs...))
			require.NotEmpty(t, env["SECRET_KEY"], "Deployment/%s/%s: an empty key stores secrets in plain text", d.Name, c.Name)
			_, err := secretbox.ParseKey(env["SECRET_KEY"])
			require.Error(t, err, "the placeholder must not pass for a key")
		}
	}
	require.Contains(t, refs, "hookd-api/api")
	require.Contains(t, refs, "hookd-dispatcher/dispatcher")
	require.Len(t, slices.Compact(slices.Collect(maps.Values(refs))), 1, "one Secret key for every process: %v", refs)
	for _, j := range k.Jobs {
		for _, c := range j.Spec.Template.Spec.Containers {
			_, _, ok := deploycheck.SecretRef(c, "SECRET_KEY")
			require.False(t, ok, "Job/%s/%s: migrations open no sealed value", j.Name, c.Name)
		}
	}
}
