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

var apiPorts = deploy.K8sPorts{Health: "--listen-addr", Metrics: "--metrics-addr"}

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
	containers, errs := deploy.CheckK8sContainers(k8sManifests(t, nil), df, binary(), apiPorts)
	require.NoError(t, errors.Join(errs...))
	require.ElementsMatch(t, []string{"Deployment/hookd-api/api", "Job/hookd-migrate/migrate"}, containers)
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
			edit: replace("config.yaml", `DB_MAX_CONNS: "20"`, `DB_MAX_CONNS: "twenty"`),
			want: `DB_MAX_CONNS="twenty": must be an integer`,
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
			want: `--listen-addr="127.0.0.1:8080" listens on loopback`,
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
			_, errs := deploy.CheckK8sContainers(k8sManifests(t, tc.edit), df, binary(), apiPorts)
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
	t.Run("flag renamed in the code", func(t *testing.T) {
		t.Parallel()
		b := binary()
		require.Equal(t, "LISTEN_ADDR", b.Flags["--listen-addr"])
		delete(b.Flags, "--listen-addr")
		b.Flags["--listen-address"] = "LISTEN_ADDRESS"
		_, errs := deploy.CheckK8sContainers(k8sManifests(t, nil), df, b, apiPorts)
		require.ErrorContains(t, errors.Join(errs...), "Deployment/hookd-api/api: environment variable LISTEN_ADDR is not the twin of any api flag")
	})
}
