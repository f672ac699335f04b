package deploycheck

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Ports names the flags holding the addresses a binary serves on.
type Ports struct {
	// Health is the flag whose address serves /healthz and /readyz.
	Health string
	// Metrics is the flag whose address serves /metrics, which needs no
	// token.
	Metrics string
}

// CheckCompose checks every compose service that runs b: b accepts its
// command and environment, and its /metrics address is reachable on the
// compose network but not published on the host. It returns those
// services' names.
func CheckCompose(runs []ComposeRun, b Binary, ports Ports) (services []string, errs []error) {
	for _, r := range runs {
		if r.Program != b.Name {
			continue
		}
		services = append(services, r.Service)
		fail := func(err error) { errs = append(errs, fmt.Errorf("service %s: %w", r.Service, err)) }
		for _, err := range b.CheckInvocation(r.Args, r.Env) {
			fail(err)
		}
		if !servesHTTP(r.Args) {
			continue
		}
		addr, ok := b.Setting(ports.Metrics, r.Args, r.Env)
		if !ok {
			fail(fmt.Errorf("%s (%s) must be set: its default listens on loopback, out of reach of the compose network", ports.Metrics, b.Flags[ports.Metrics]))
			continue
		}
		port, err := ServedPort(addr)
		if err != nil {
			fail(fmt.Errorf("%s: %w", ports.Metrics, err))
			continue
		}
		for _, p := range r.Config.Ports {
			if int(p.Target) == port && p.Published != "" {
				fail(fmt.Errorf("publishes /metrics (port %d) on the host, where it needs no token: use expose", port))
			}
		}
	}
	return services, errs
}

// servesHTTP reports whether a command line starts a server rather than a
// one-shot subcommand such as migrate.
func servesHTTP(args []string) bool {
	return len(args) == 0 || strings.HasPrefix(args[0], "-") || args[0] == "serve" || args[0] == "run"
}

// CheckK8s checks every container of the manifests that runs b: the image
// is one the kustomization sets, every ConfigMap and Secret it reads
// exists with the key, b accepts its command line and environment, and in
// a Deployment the health and metrics addresses are set off loopback, the
// liveness probe GETs /healthz and the readiness probe /readyz on the
// health address's port, and the prometheus.io/port annotation is the
// metrics address's port. It returns the containers as
// Kind/name/container.
func CheckK8s(k *K8s, df *Dockerfile, b Binary, ports Ports) (containers []string, errs []error) {
	img, err := df.Image("")
	if err != nil {
		return nil, []error{err}
	}
	ws, err := k.Workloads()
	if err != nil {
		return nil, []error{err}
	}
	for _, w := range ws {
		for _, c := range slices.Concat(w.Template.Spec.InitContainers, w.Template.Spec.Containers) {
			ref := w.Ref + "/" + c.Name
			fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(ref+": "+format, args...)) }
			argv := Argv(img.Entrypoint, img.Cmd, c.Command, c.Args)
			if len(argv) == 0 {
				fail("runs nothing")
				continue
			}
			if prog, err := img.Find(argv[0]); err != nil || prog != b.Name {
				continue
			}
			containers = append(containers, ref)
			image, _, _ := strings.Cut(c.Image, "@")
			if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
				image = image[:i]
			}
			if !slices.ContainsFunc(k.Kustomization.Images, func(im KustomizeImage) bool { return im.Name == image }) {
				fail("runs %s from image %q, which kustomization.yaml's images do not set", b.Name, c.Image)
			}
			env, envErrs := k.Env(c)
			for _, e := range envErrs {
				fail("%v", e)
			}
			for _, e := range b.CheckInvocation(argv[1:], env) {
				fail("%v", e)
			}
			if !strings.HasPrefix(w.Ref, "Deployment/") {
				continue
			}
			served := func(flag string) int {
				addr, ok := b.Setting(flag, argv[1:], env)
				if !ok {
					fail("%s (%s) must be set: its default listens on loopback, out of the kubelet's and Prometheus' reach", flag, b.Flags[flag])
					return 0
				}
				port, err := ServedPort(addr)
				if err != nil {
					fail("%s: %v", flag, err)
				}
				return port
			}
			health, metrics := served(ports.Health), served(ports.Metrics)
			for _, p := range []struct {
				name, path string
				probe      *corev1.Probe
			}{{"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					fail("no HTTP %s", p.name)
					continue
				}
				if p.probe.HTTPGet.Path != p.path {
					fail("%s GETs %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
				}
				port, err := containerPort(c, p.probe.HTTPGet.Port.String())
				switch {
				case err != nil:
					fail("%s: %v", p.name, err)
				case health != 0 && port != health:
					fail("%s probes port %d, but %s serves %s on port %d", p.name, port, b.Name, p.path, health)
				}
			}
			if p, ok := w.Template.Annotations["prometheus.io/port"]; ok && metrics != 0 && p != strconv.Itoa(metrics) {
				fail("prometheus.io/port is %s, but %s serves /metrics on port %d", p, b.Name, metrics)
			}
		}
	}
	return containers, errs
}

// containerPort resolves a port given by name or number to one the
// container declares.
func containerPort(c corev1.Container, port string) (int, error) {
	for _, p := range c.Ports {
		if port == p.Name || port == strconv.Itoa(int(p.ContainerPort)) {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("port %q is not one of the container's ports", port)
}

// CheckImage checks that the Dockerfile builds pkg with cgo off and that
// the image of target ("" for the shipped one) holds the binary name on
// its PATH and runs as a non-root user.
func CheckImage(df *Dockerfile, target, pkg, name string) []error {
	var errs []error
	if err := df.Builds(pkg); err != nil {
		errs = append(errs, err)
	}
	img, err := df.Image(target)
	if err != nil {
		return append(errs, err)
	}
	if _, err := img.Find(name); err != nil {
		errs = append(errs, fmt.Errorf("dockerfile: image %q: %w", target, err))
	}
	if user, _, _ := strings.Cut(img.User, ":"); user == "" || user == "root" || user == "0" {
		errs = append(errs, fmt.Errorf("dockerfile: image %q must set a non-root USER, got %q", target, img.User))
	}
	return errs
}

// Program returns the base name of what an image runs by default.
func (img *Image) Program() string {
	argv := slices.Concat(img.Entrypoint, img.Cmd)
	if len(argv) == 0 {
		return ""
	}
	return path.Base(argv[0])
}
