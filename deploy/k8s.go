package deploy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// K8sObject is the part of a Kubernetes manifest (or of a kustomization)
// the checks read.
type K8sObject struct {
	// File is the manifest's base name.
	File       string            `yaml:"-"`
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   K8sMeta           `yaml:"metadata"`
	Spec       K8sSpec           `yaml:"spec"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	// Resources and Images are a Kustomization's.
	Resources []string   `yaml:"resources"`
	Images    []K8sImage `yaml:"images"`
}

// K8sImage is a kustomization's image override.
type K8sImage struct {
	Name    string `yaml:"name"`
	NewName string `yaml:"newName"`
	NewTag  string `yaml:"newTag"`
}

// Ref names the object as Kind/name.
func (o K8sObject) Ref() string { return o.Kind + "/" + o.Metadata.Name }

// K8sMeta is an object's or a pod template's metadata.
type K8sMeta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// K8sSpec holds the spec fields of the kinds hookd ships: Deployment, Job,
// Service and PodDisruptionBudget.
type K8sSpec struct {
	Replicas       *int          `yaml:"replicas"`
	Selector       k8sSelector   `yaml:"selector"`
	Template       *PodTemplate  `yaml:"template"`
	Ports          []ServicePort `yaml:"ports"`
	MinAvailable   *intOrString  `yaml:"minAvailable"`
	MaxUnavailable *intOrString  `yaml:"maxUnavailable"`
}

// PodTemplate is a workload's pod template.
type PodTemplate struct {
	Metadata K8sMeta `yaml:"metadata"`
	Spec     struct {
		Containers     []Container `yaml:"containers"`
		InitContainers []Container `yaml:"initContainers"`
	} `yaml:"spec"`
}

// Container is one container of a pod template.
type Container struct {
	Name            string          `yaml:"name"`
	Image           string          `yaml:"image"`
	Command         []string        `yaml:"command"`
	Args            []string        `yaml:"args"`
	Env             []EnvVar        `yaml:"env"`
	EnvFrom         []EnvFromSource `yaml:"envFrom"`
	Ports           []ContainerPort `yaml:"ports"`
	LivenessProbe   *Probe          `yaml:"livenessProbe"`
	ReadinessProbe  *Probe          `yaml:"readinessProbe"`
	SecurityContext *struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

// EnvVar is one env entry: a literal value or a key of a Secret or
// ConfigMap.
type EnvVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef    *KeyRef `yaml:"secretKeyRef"`
		ConfigMapKeyRef *KeyRef `yaml:"configMapKeyRef"`
	} `yaml:"valueFrom"`
}

// KeyRef points at one key of a Secret or ConfigMap.
type KeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

// EnvFromSource imports every key of a ConfigMap or Secret.
type EnvFromSource struct {
	Prefix       string `yaml:"prefix"`
	ConfigMapRef *struct {
		Name string `yaml:"name"`
	} `yaml:"configMapRef"`
	SecretRef *struct {
		Name string `yaml:"name"`
	} `yaml:"secretRef"`
}

// ContainerPort is a named container port.
type ContainerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

// Probe is a container probe; only HTTP probes are read.
type Probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name       string      `yaml:"name"`
	Port       int         `yaml:"port"`
	TargetPort intOrString `yaml:"targetPort"`
}

// intOrString is a Kubernetes IntOrString, kept as written.
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a name", n.Line)
	}
	*v = intOrString(n.Value)
	return nil
}

// k8sSelector is a label selector in either form: a Service's plain map or
// a workload's matchLabels.
type k8sSelector map[string]string

func (s *k8sSelector) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	if err := n.Decode(&raw); err == nil && raw.MatchLabels != nil {
		*s = raw.MatchLabels
		return nil
	}
	var m map[string]string
	if err := n.Decode(&m); err != nil {
		return fmt.Errorf("line %d: selector: %w", n.Line, err)
	}
	*s = m
	return nil
}

// matches reports whether every label of s is set to its value in labels.
func (s k8sSelector) matches(labels map[string]string) bool {
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// LoadK8s reads every *.yaml file of dir, each possibly holding several
// documents.
func LoadK8s(dir string) ([]K8sObject, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("list manifests: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", dir)
	}
	var out []K8sObject
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		objs, err := ParseK8s(filepath.Base(f), b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// ParseK8s decodes the documents of one manifest file.
func ParseK8s(file string, b []byte) ([]K8sObject, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(false)
	var out []K8sObject
	for {
		var o K8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if o.Kind == "" {
			continue // an empty document
		}
		o.File = file
		out = append(out, o)
	}
}

// workload is a container in context: its object and pod template.
type workload struct {
	obj       K8sObject
	container Container
}

func (w workload) ref() string { return w.obj.Ref() + "/" + w.container.Name }

func workloads(objs []K8sObject) []workload {
	var out []workload
	for _, o := range objs {
		if o.Spec.Template == nil {
			continue
		}
		for _, c := range slices.Concat(o.Spec.Template.Spec.InitContainers, o.Spec.Template.Spec.Containers) {
			out = append(out, workload{obj: o, container: c})
		}
	}
	return out
}

func find(objs []K8sObject, kind, name string) (K8sObject, bool) {
	i := slices.IndexFunc(objs, func(o K8sObject) bool { return o.Kind == kind && o.Metadata.Name == name })
	if i < 0 {
		return K8sObject{}, false
	}
	return objs[i], true
}

// values returns a ConfigMap's or Secret's data (a Secret's data decoded).
func (o K8sObject) values() (map[string]string, error) {
	out := maps.Clone(o.Data)
	if out == nil {
		out = map[string]string{}
	}
	if o.Kind == "Secret" {
		for k, v := range o.Data {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return nil, fmt.Errorf("%s: key %s is not base64: %w", o.Ref(), k, err)
			}
			out[k] = string(b)
		}
	}
	maps.Copy(out, o.StringData)
	return out, nil
}

// containerEnv resolves a container's environment from its envFrom sources
// and env entries, as the kubelet does (env wins).
func containerEnv(objs []K8sObject, c Container) (map[string]string, []error) {
	env := map[string]string{}
	var errs []error
	source := func(kind, name string) map[string]string {
		o, ok := find(objs, kind, name)
		if !ok {
			errs = append(errs, fmt.Errorf("%s %s is not among the manifests", kind, name))
			return nil
		}
		v, err := o.values()
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	for _, f := range c.EnvFrom {
		var vals map[string]string
		switch {
		case f.ConfigMapRef != nil:
			vals = source("ConfigMap", f.ConfigMapRef.Name)
		case f.SecretRef != nil:
			vals = source("Secret", f.SecretRef.Name)
		}
		for k, v := range vals {
			env[f.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil || e.ValueFrom.ConfigMapKeyRef != nil:
			kind, ref := "Secret", e.ValueFrom.SecretKeyRef
			if ref == nil {
				kind, ref = "ConfigMap", e.ValueFrom.ConfigMapKeyRef
			}
			vals := source(kind, ref.Name)
			v, ok := vals[ref.Key]
			if vals != nil && !ok {
				errs = append(errs, fmt.Errorf("env %s: %s %s has no key %s", e.Name, kind, ref.Name, ref.Key))
			}
			env[e.Name] = v
		default:
			env[e.Name] = ""
		}
	}
	return env, errs
}

// CheckK8sObjects checks that the manifests hang together: the
// kustomization lists every manifest and names the image every hookd
// container runs (a program the Dockerfile's image holds); workload
// selectors select their own pods; every Service and PodDisruptionBudget
// selects a workload, a Service's target ports are its container ports, a
// budget leaves room to drain a node; every ConfigMap and Secret an env
// refers to exists with the key; every container has CPU and memory
// requests and limits and cannot escalate privileges; every Deployment
// container has HTTP liveness and readiness probes on its own ports.
func CheckK8sObjects(objs []K8sObject, df *Dockerfile) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var kust *K8sObject
	files := map[string]bool{}
	for i, o := range objs {
		if o.Kind == "Kustomization" {
			kust = &objs[i]
			continue
		}
		files[o.File] = true
	}
	if kust == nil {
		fail("no kustomization.yaml")
	} else if got, want := slices.Sorted(slices.Values(kust.Resources)), slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
		fail("kustomization.yaml resources %v, want every manifest: %v", got, want)
	}

	bins := df.Final().Binaries()
	ep, cmd, err := df.Defaults()
	if err != nil {
		return append(errs, err)
	}
	for _, w := range workloads(objs) {
		c := w.container
		argv := Service{Entrypoint: c.Command, Command: c.Args}.Argv(ep, cmd)
		if len(argv) > 0 && findBinary(argv[0], bins) == nil {
			image, _, _ := strings.Cut(c.Image, "@")
			if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
				image = image[:i]
			}
			if kust != nil && !slices.ContainsFunc(kust.Images, func(im K8sImage) bool { return im.Name == image }) {
				fail("%s runs %s from image %q, which kustomization.yaml's images do not set", w.ref(), argv[0], c.Image)
			}
		}
		for _, res := range []string{"cpu", "memory"} {
			if c.Resources.Requests[res] == "" || c.Resources.Limits[res] == "" {
				fail("%s: no %s request and limit", w.ref(), res)
			}
		}
		if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
			fail("%s: securityContext.allowPrivilegeEscalation must be false", w.ref())
		}
		if _, es := containerEnv(objs, c); len(es) > 0 {
			for _, e := range es {
				fail("%s: %w", w.ref(), e)
			}
		}
		if w.obj.Kind == "Deployment" {
			for name, p := range map[string]*Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil {
					fail("%s: no HTTP %s", w.ref(), name)
					continue
				}
				if _, err := containerPort(c, p.HTTPGet.Port); err != nil {
					fail("%s: %s: %w", w.ref(), name, err)
				}
			}
		}
		if p, ok := w.obj.Spec.Template.Metadata.Annotations["prometheus.io/port"]; ok {
			if _, err := containerPort(c, intOrString(p)); err != nil {
				fail("%s: prometheus.io/port: %w", w.ref(), err)
			}
		}
	}

	for _, o := range objs {
		switch o.Kind {
		case "Deployment", "StatefulSet", "Job":
			if o.Spec.Template == nil {
				fail("%s: no pod template", o.Ref())
				continue
			}
			if o.Kind != "Job" && !o.Spec.Selector.matches(o.Spec.Template.Metadata.Labels) {
				fail("%s: its selector does not select its own pods", o.Ref())
			}
		case "Service":
			ws := selected(objs, o.Spec.Selector)
			if len(ws) != 1 {
				fail("%s selects %d workloads, want 1", o.Ref(), len(ws))
				continue
			}
			for _, p := range o.Spec.Ports {
				if !slices.ContainsFunc(ws[0].Spec.Template.Spec.Containers, func(c Container) bool {
					_, err := containerPort(c, p.TargetPort)
					return err == nil
				}) {
					fail("%s port %s: target port %q is no container port of %s", o.Ref(), p.Name, p.TargetPort, ws[0].Ref())
				}
			}
		case "PodDisruptionBudget":
			ws := selected(objs, o.Spec.Selector)
			if len(ws) != 1 {
				fail("%s selects %d workloads, want 1", o.Ref(), len(ws))
				continue
			}
			replicas := 1
			if ws[0].Spec.Replicas != nil {
				replicas = *ws[0].Spec.Replicas
			}
			switch {
			case o.Spec.MinAvailable != nil:
				n, err := strconv.Atoi(string(*o.Spec.MinAvailable))
				if err != nil || n >= replicas {
					fail("%s: minAvailable %s of %d replicas leaves no pod to evict", o.Ref(), *o.Spec.MinAvailable, replicas)
				}
			case o.Spec.MaxUnavailable != nil:
				n, err := strconv.Atoi(string(*o.Spec.MaxUnavailable))
				if err != nil || n < 1 {
					fail("%s: maxUnavailable %s leaves no pod to evict", o.Ref(), *o.Spec.MaxUnavailable)
				}
			default:
				fail("%s: neither minAvailable nor maxUnavailable", o.Ref())
			}
		}
	}
	return errs
}

// selected returns the workloads whose pods a selector selects.
func selected(objs []K8sObject, s k8sSelector) []K8sObject {
	var out []K8sObject
	for _, o := range objs {
		if o.Spec.Template != nil && o.Kind != "Job" && s.matches(o.Spec.Template.Metadata.Labels) {
			out = append(out, o)
		}
	}
	return out
}

// containerPort resolves a port given by name or number to a port the
// container declares.
func containerPort(c Container, port intOrString) (int, error) {
	for _, p := range c.Ports {
		if string(port) == p.Name || string(port) == strconv.Itoa(p.ContainerPort) {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("port %q is not one of the container's ports", port)
}

// K8sPorts names the flags holding the addresses a binary serves on.
type K8sPorts struct {
	// Health is the flag whose address serves /healthz and /readyz.
	Health string
	// Metrics is the flag whose address serves /metrics.
	Metrics string
}

// CheckK8sContainers checks every container that runs b in the manifests:
// each environment variable it gets (env and envFrom alike) is the twin of
// one of b's flags, each --flag is b's, b accepts the command line and the
// environment; in a Deployment, liveness probes GET /healthz and readiness
// probes /readyz on the port of the ports.Health address, the
// prometheus.io/port annotation is the port of the ports.Metrics address,
// and both addresses are set explicitly and off loopback (the binaries'
// defaults listen on 127.0.0.1, which the kubelet and Prometheus cannot
// reach). It returns the containers that run b as Kind/name/container.
func CheckK8sContainers(objs []K8sObject, df *Dockerfile, b Binary, ports K8sPorts) (containers []string, errs []error) {
	bins := df.Final().Binaries()
	ep, cmd, err := df.Defaults()
	if err != nil {
		return nil, []error{err}
	}
	twins := map[string]bool{}
	for _, env := range b.Flags {
		if env != "" {
			twins[env] = true
		}
	}
	for _, w := range workloads(objs) {
		c := w.container
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", w.ref(), fmt.Sprintf(format, args...)))
		}
		argv := Service{Entrypoint: c.Command, Command: c.Args}.Argv(ep, cmd)
		if len(argv) == 0 {
			fail("runs nothing")
			continue
		}
		if err := findBinary(argv[0], bins); err != nil || path.Base(argv[0]) != b.Name {
			continue
		}
		containers = append(containers, w.ref())
		env, envErrs := containerEnv(objs, c)
		for _, e := range envErrs {
			fail("%v", e)
		}
		for _, k := range slices.Sorted(maps.Keys(env)) {
			if !twins[k] {
				fail("environment variable %s is not the twin of any %s flag", k, b.Name)
			}
		}
		for _, a := range argv[1:] {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if _, ok := b.Flags["--"+flag]; !ok {
				fail("--%s is not one of %s's flags", flag, b.Name)
			}
		}
		if err := checkArgs(b, argv[1:], env); err != nil {
			fail("%s %q: %v", b.Name, argv[1:], err)
		}
		if w.obj.Kind != "Deployment" {
			continue
		}
		healthPort, err := servedPort(b, ports.Health, argv, env)
		if err != nil {
			fail("%v", err)
		}
		for _, p := range []struct {
			name, path string
			probe      *Probe
		}{{"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				fail("no HTTP %s", p.name)
				continue
			}
			if p.probe.HTTPGet.Path != p.path {
				fail("%s GETs %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
			}
			port, err := containerPort(c, p.probe.HTTPGet.Port)
			switch {
			case err != nil:
				fail("%s: %v", p.name, err)
			case healthPort != 0 && port != healthPort:
				fail("%s probes port %d, but %s serves %s on port %d", p.name, port, b.Name, p.path, healthPort)
			}
		}
		metricsPort, err := servedPort(b, ports.Metrics, argv, env)
		if err != nil {
			fail("%v", err)
		}
		if p, ok := w.obj.Spec.Template.Metadata.Annotations["prometheus.io/port"]; ok && metricsPort != 0 && p != strconv.Itoa(metricsPort) {
			fail("prometheus.io/port is %s, but %s serves /metrics on port %d", p, b.Name, metricsPort)
		}
	}
	return containers, errs
}

// servedPort returns the port of the address flag is set to on the command
// line or through its environment twin; it must be set, and not to a
// loopback address.
func servedPort(b Binary, flag string, argv []string, env map[string]string) (int, error) {
	addr, set := "", false
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			addr, set = v, true
		} else if a == flag && i+1 < len(argv) {
			addr, set = argv[i+1], true
		}
	}
	if twin := b.Flags[flag]; !set && twin != "" {
		addr, set = env[twin]
	}
	if !set {
		return 0, fmt.Errorf("%s (%s) must be set: its default listens on loopback, out of the kubelet's and Prometheus' reach", flag, b.Flags[flag])
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", flag, addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return 0, fmt.Errorf("%s=%q listens on loopback, out of the kubelet's and Prometheus' reach", flag, addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: port: %w", flag, addr, err)
	}
	return n, nil
}
