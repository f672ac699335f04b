package deploy_test

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
)

func loadK8s(t *testing.T) ([]deploy.K8sObject, *deploy.Dockerfile) {
	t.Helper()
	objs, err := deploy.LoadK8s("k8s")
	require.NoError(t, err)
	df, err := deploy.LoadDockerfile("../Dockerfile")
	require.NoError(t, err)
	return objs, df
}

func TestK8sManifestsHangTogether(t *testing.T) {
	t.Parallel()
	objs, df := loadK8s(t)
	require.NoError(t, errors.Join(deploy.CheckK8sObjects(objs, df)...))

	var refs []string
	for _, o := range objs {
		refs = append(refs, o.Ref())
	}
	require.ElementsMatch(t, []string{
		"Kustomization/", "ConfigMap/hookd-api", "ConfigMap/hookd-dispatcher", "Secret/hookd", "Job/hookd-migrate",
		"Deployment/hookd-api", "Service/hookd-api", "PodDisruptionBudget/hookd-api",
		"Deployment/hookd-dispatcher", "PodDisruptionBudget/hookd-dispatcher",
	}, refs)
	secret := objs[slices.IndexFunc(objs, func(o deploy.K8sObject) bool { return o.Kind == "Secret" })]
	require.ElementsMatch(t, []string{"DATABASE_URL", "API_TOKEN"}, slices.Collect(maps.Keys(secret.StringData)), "the Secret holds the database URL and the API token")
	dispatcher := objs[slices.IndexFunc(objs, func(o deploy.K8sObject) bool { return o.Ref() == "Deployment/hookd-dispatcher" })]
	require.Equal(t, 3, *dispatcher.Spec.Replicas)
}

// TestK8sObjectChecksCatchMistakes: each check fails on the mistake it is
// there for.
func TestK8sObjectChecksCatchMistakes(t *testing.T) {
	t.Parallel()
	objs, df := loadK8s(t)
	index := func(objs []deploy.K8sObject, ref string) int {
		i := slices.IndexFunc(objs, func(o deploy.K8sObject) bool { return o.Ref() == ref })
		require.GreaterOrEqual(t, i, 0, ref)
		return i
	}
	for name, tc := range map[string]struct {
		edit func(objs []deploy.K8sObject) []deploy.K8sObject
		want string
	}{
		"a manifest left out of the kustomization": {
			edit: func(objs []deploy.K8sObject) []deploy.K8sObject {
				k := index(objs, "Kustomization/")
				objs[k].Resources = slices.DeleteFunc(slices.Clone(objs[k].Resources), func(r string) bool { return r == "dispatcher.yaml" })
				return objs
			},
			want: "kustomization.yaml resources",
		},
		"an image the kustomization does not set": {
			edit: func(objs []deploy.K8sObject) []deploy.K8sObject {
				i := index(objs, "Deployment/hookd-api")
				tpl := *objs[i].Spec.Template
				tpl.Spec.Containers = slices.Clone(tpl.Spec.Containers)
				tpl.Spec.Containers[0].Image = "hookd:local"
				objs[i].Spec.Template = &tpl
				return objs
			},
			want: `Deployment/hookd-api/api runs api from image "hookd:local", which kustomization.yaml's images do not set`,
		},
		"a Service aimed at a port the pods do not have": {
			edit: func(objs []deploy.K8sObject) []deploy.K8sObject {
				i := index(objs, "Service/hookd-api")
				objs[i].Spec.Ports = slices.Clone(objs[i].Spec.Ports)
				objs[i].Spec.Ports[0].TargetPort = "web"
				return objs
			},
			want: `Service/hookd-api port http: target port "web" is no container port of Deployment/hookd-api`,
		},
		"a budget that blocks every drain": {
			edit: func(objs []deploy.K8sObject) []deploy.K8sObject {
				i := index(objs, "PodDisruptionBudget/hookd-dispatcher")
				objs[i].Spec.MinAvailable = ptr(*objs[i].Spec.MinAvailable)
				*objs[i].Spec.MinAvailable = "3"
				return objs
			},
			want: "PodDisruptionBudget/hookd-dispatcher: minAvailable 3 of 3 replicas leaves no pod to evict",
		},
		"a Secret without the key an env reads": {
			edit: func(objs []deploy.K8sObject) []deploy.K8sObject {
				i := index(objs, "Secret/hookd")
				objs[i].StringData = map[string]string{"DATABASE_URL": "postgres://x@y/z"}
				return objs
			},
			want: "Deployment/hookd-api/api: env API_TOKEN: Secret hookd has no key API_TOKEN",
		},
		"a container without limits": {
			edit: func(objs []deploy.K8sObject) []deploy.K8sObject {
				i := index(objs, "Job/hookd-migrate")
				tpl := *objs[i].Spec.Template
				tpl.Spec.Containers = slices.Clone(tpl.Spec.Containers)
				tpl.Spec.Containers[0].Resources.Limits = nil
				objs[i].Spec.Template = &tpl
				return objs
			},
			want: "Job/hookd-migrate/migrate: no cpu request and limit",
		},
		"a Deployment without probes": {
			edit: func(objs []deploy.K8sObject) []deploy.K8sObject {
				i := index(objs, "Deployment/hookd-dispatcher")
				tpl := *objs[i].Spec.Template
				tpl.Spec.Containers = slices.Clone(tpl.Spec.Containers)
				tpl.Spec.Containers[0].ReadinessProbe = nil
				objs[i].Spec.Template = &tpl
				return objs
			},
			want: "Deployment/hookd-dispatcher/dispatcher: no HTTP readinessProbe",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			errs := deploy.CheckK8sObjects(tc.edit(slices.Clone(objs)), df)
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
}

func ptr[T any](v T) *T { return &v }
