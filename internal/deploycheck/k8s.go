package deploycheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// K8s is a directory of Kubernetes manifests decoded into the API's own
// types. Decoding is strict: a misspelt or misplaced field is an error, as
// kubectl's server-side field validation would make it.
type K8s struct {
	Deployments   []appsv1.Deployment
	Jobs          []batchv1.Job
	Services      []corev1.Service
	ConfigMaps    []corev1.ConfigMap
	Secrets       []corev1.Secret
	Budgets       []policyv1.PodDisruptionBudget
	Kustomization Kustomization
	// Files are the base names of the manifests other than
	// kustomization.yaml.
	Files []string
}

// Kustomization is the part of a kustomization.yaml the checks read.
type Kustomization struct {
	Resources []string         `json:"resources"`
	Images    []KustomizeImage `json:"images"`
}

// KustomizeImage is a kustomization's image override.
type KustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
}

// LoadK8s decodes every *.yaml of dir, each file's text passed through
// edit first when edit is not nil (tests break a manifest that way).
func LoadK8s(dir string, edit func(file, text string) string) (*K8s, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s (%v)", dir, err)
	}
	k := &K8s{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		name := filepath.Base(f)
		if edit != nil {
			b = []byte(edit(name, string(b)))
		}
		if err := k.add(name, b); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return k, nil
}

func (k *K8s) add(file string, b []byte) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return err
		}
		switch tm.Kind {
		case "":
			continue // an empty document
		case "Kustomization":
			err = yaml.Unmarshal(doc, &k.Kustomization)
		case "Deployment":
			err = decode(doc, &k.Deployments)
		case "Job":
			err = decode(doc, &k.Jobs)
		case "Service":
			err = decode(doc, &k.Services)
		case "ConfigMap":
			err = decode(doc, &k.ConfigMaps)
		case "Secret":
			err = decode(doc, &k.Secrets)
		case "PodDisruptionBudget":
			err = decode(doc, &k.Budgets)
		default:
			err = fmt.Errorf("kind %s: add its API type to deploycheck", tm.Kind)
		}
		if err != nil {
			return err
		}
		if tm.Kind != "Kustomization" && !slices.Contains(k.Files, file) {
			k.Files = append(k.Files, file)
		}
	}
}

func decode[T any](doc []byte, into *[]T) error {
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		return err
	}
	*into = append(*into, v)
	return nil
}

// Workload is a pod template and the object that runs it.
type Workload struct {
	// Ref is Kind/name.
	Ref string
	// Pods is the most pods of it that can hold connections at once: for a
	// Deployment, its replicas plus, during a rollout, maxSurge new pods
	// and up to maxSurge + maxUnavailable old ones still shutting down (the
	// controller does not count terminating pods); 1 for a Job.
	Pods     int
	Template corev1.PodTemplateSpec
}

// Workloads returns every Deployment and Job.
func (k *K8s) Workloads() ([]Workload, error) {
	var out []Workload
	for _, d := range k.Deployments {
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		var maxSurge, maxUnavailable *intstr.IntOrString
		if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
			maxSurge, maxUnavailable = ru.MaxSurge, ru.MaxUnavailable
		}
		// Unset, both are 25%: the surge rounded up, the unavailable down.
		surge, err := scaled(maxSurge, replicas, true)
		if err != nil {
			return nil, fmt.Errorf("%s: maxSurge: %w", "Deployment/"+d.Name, err)
		}
		unavailable, err := scaled(maxUnavailable, replicas, false)
		if err != nil {
			return nil, fmt.Errorf("%s: maxUnavailable: %w", "Deployment/"+d.Name, err)
		}
		if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			surge, unavailable = 0, 0
		}
		out = append(out, Workload{Ref: "Deployment/" + d.Name, Pods: replicas + 2*surge + unavailable, Template: d.Spec.Template})
	}
	for _, j := range k.Jobs {
		out = append(out, Workload{Ref: "Job/" + j.Name, Pods: 1, Template: j.Spec.Template})
	}
	return out, nil
}

func scaled(v *intstr.IntOrString, replicas int, roundUp bool) (int, error) {
	if v == nil {
		d := intstr.FromString("25%")
		v = &d
	}
	return intstr.GetScaledValueFromIntOrPercent(v, replicas, roundUp)
}

// Env resolves a container's environment from its envFrom sources and env
// entries as the kubelet does (env wins), and returns an error for every
// ConfigMap, Secret or key it names that the manifests do not hold: the
// pod would not start.
func (k *K8s) Env(c corev1.Container) (map[string]string, []error) {
	env := map[string]string{}
	var errs []error
	for _, f := range c.EnvFrom {
		var vals map[string]string
		var err error
		switch {
		case f.ConfigMapRef != nil:
			vals, err = k.values("ConfigMap", f.ConfigMapRef.Name)
		case f.SecretRef != nil:
			vals, err = k.values("Secret", f.SecretRef.Name)
		}
		if err != nil {
			errs = append(errs, err)
		}
		for key, v := range vals {
			env[f.Prefix+key] = v
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			continue
		}
		kind, name, key := "", "", ""
		switch {
		case e.ValueFrom.SecretKeyRef != nil:
			kind, name, key = "Secret", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.ConfigMapKeyRef != nil:
			kind, name, key = "ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key
		default:
			env[e.Name] = ""
			continue
		}
		vals, err := k.values(kind, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("env %s: %w", e.Name, err))
			continue
		}
		v, ok := vals[key]
		if !ok {
			errs = append(errs, fmt.Errorf("env %s: %s %s has no key %s", e.Name, kind, name, key))
		}
		env[e.Name] = v
	}
	return env, errs
}

// FromSecret reports whether the container's variable name comes from a
// Secret.
func FromSecret(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}
	}
	return false
}

// SecretRef returns the Secret and key the container's variable name is
// read from, or ok false when it is not read from a Secret.
func SecretRef(c corev1.Container, name string) (secret, key string, ok bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, true
		}
	}
	return "", "", false
}

func (k *K8s) values(kind, name string) (map[string]string, error) {
	out := map[string]string{}
	switch kind {
	case "ConfigMap":
		i := slices.IndexFunc(k.ConfigMaps, func(c corev1.ConfigMap) bool { return c.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%s %s is not among the manifests", kind, name)
		}
		for key, v := range k.ConfigMaps[i].Data {
			out[key] = v
		}
	case "Secret":
		i := slices.IndexFunc(k.Secrets, func(s corev1.Secret) bool { return s.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%s %s is not among the manifests", kind, name)
		}
		for key, v := range k.Secrets[i].Data {
			out[key] = string(v)
		}
		for key, v := range k.Secrets[i].StringData {
			out[key] = v
		}
	}
	return out, nil
}
