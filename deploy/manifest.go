// Package deploy holds hookd's local runner (run-local.sh) and reads its
// deployment manifests, docker-compose.yml and the Dockerfile, so that each
// binary's tests can hold them to the binary's real flags, environment
// variables and subcommands: no Docker engine is needed to catch a renamed
// flag.
package deploy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Compose is the part of a docker-compose.yml the checks read.
type Compose struct {
	Services map[string]Service `yaml:"services"`
}

// Service is one compose service.
type Service struct {
	Image       string      `yaml:"image"`
	Build       any         `yaml:"build"`
	Entrypoint  argv        `yaml:"entrypoint"`
	Command     argv        `yaml:"command"`
	Environment environment `yaml:"environment"`
}

// Built reports whether the service runs the image built from the Dockerfile.
func (s Service) Built() bool { return s.Build != nil }

// argv is a command in either compose form: a list, or a string split on
// spaces.
type argv []string

func (a *argv) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*a = strings.Fields(n.Value)
		return nil
	case yaml.SequenceNode:
		var s []string
		if err := n.Decode(&s); err != nil {
			return fmt.Errorf("command: %w", err)
		}
		*a = s
		return nil
	}
	return fmt.Errorf("line %d: a command must be a string or a list", n.Line)
}

// environment is a service's environment in either compose form: a mapping,
// or a list of NAME=value.
type environment map[string]string

func (e *environment) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		var m map[string]*string
		if err := n.Decode(&m); err != nil {
			return fmt.Errorf("environment: %w", err)
		}
		*e = make(environment, len(m))
		for k, v := range m {
			if v != nil {
				(*e)[k] = *v
			} else {
				(*e)[k] = ""
			}
		}
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return fmt.Errorf("environment: %w", err)
		}
		*e = make(environment, len(l))
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			(*e)[k] = v
		}
		return nil
	}
	return fmt.Errorf("line %d: environment must be a mapping or a list", n.Line)
}

// LoadCompose reads a docker-compose.yml.
func LoadCompose(file string) (*Compose, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read compose file: %w", err)
	}
	return ParseCompose(b)
}

// ParseCompose parses a compose document; YAML anchors and merge keys are
// resolved.
func ParseCompose(b []byte) (*Compose, error) {
	var c Compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse compose file: %w", err)
	}
	if len(c.Services) == 0 {
		return nil, errors.New("parse compose file: no services")
	}
	return &c, nil
}

// Dockerfile is a parsed Dockerfile: its build stages in order.
type Dockerfile struct {
	Stages []Stage
}

// Stage is one FROM and the instructions after it.
type Stage struct {
	From         string
	Name         string
	Instructions []Instruction
}

// Instruction is one Dockerfile instruction, continuation lines joined.
type Instruction struct {
	// Keyword is upper case: RUN, COPY, CMD...
	Keyword string
	// Args is the rest of the instruction as written.
	Args string
	// Line is the 1-based line the instruction starts on.
	Line int
}

// LoadDockerfile reads a Dockerfile.
func LoadDockerfile(file string) (*Dockerfile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read dockerfile: %w", err)
	}
	return ParseDockerfile(string(b))
}

// ParseDockerfile splits a Dockerfile into stages and instructions.
// Comments and blank lines are dropped; a trailing backslash continues an
// instruction.
func ParseDockerfile(text string) (*Dockerfile, error) {
	var (
		df      Dockerfile
		pending strings.Builder
		start   int
	)
	flush := func() error {
		s := strings.TrimSpace(pending.String())
		pending.Reset()
		if s == "" {
			return nil
		}
		kw, args, _ := strings.Cut(s, " ")
		in := Instruction{Keyword: strings.ToUpper(kw), Args: strings.TrimSpace(args), Line: start}
		if in.Keyword == "FROM" {
			f := strings.Fields(in.Args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			if len(f) == 0 {
				return fmt.Errorf("line %d: FROM without an image", start)
			}
			st := Stage{From: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.Name = f[2]
			}
			df.Stages = append(df.Stages, st)
			return nil
		}
		if len(df.Stages) == 0 {
			if in.Keyword == "ARG" {
				return nil
			}
			return fmt.Errorf("line %d: %s before FROM", start, in.Keyword)
		}
		st := &df.Stages[len(df.Stages)-1]
		st.Instructions = append(st.Instructions, in)
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if pending.Len() == 0 {
			if trimmed == "" {
				continue
			}
			start = n
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			pending.WriteString(body)
			pending.WriteByte(' ')
			continue
		}
		pending.WriteString(line)
		if err := flush(); err != nil {
			return nil, fmt.Errorf("parse dockerfile: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse dockerfile: %w", err)
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("parse dockerfile: %w", err)
	}
	if len(df.Stages) == 0 {
		return nil, errors.New("parse dockerfile: no FROM")
	}
	return &df, nil
}

// Final returns the last stage: the image that is shipped.
func (df *Dockerfile) Final() Stage { return df.Stages[len(df.Stages)-1] }

// Exec returns the argv of the stage's last ENTRYPOINT or CMD instruction
// (keyword "ENTRYPOINT" or "CMD"); a shell form runs under /bin/sh -c.
func (s Stage) Exec(keyword string) ([]string, error) {
	var last *Instruction
	for i := range s.Instructions {
		if s.Instructions[i].Keyword == keyword {
			last = &s.Instructions[i]
		}
	}
	if last == nil {
		return nil, nil
	}
	if strings.HasPrefix(last.Args, "[") {
		var a []string
		if err := json.Unmarshal([]byte(last.Args), &a); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", last.Line, keyword, err)
		}
		return a, nil
	}
	return []string{"/bin/sh", "-c", last.Args}, nil
}

// Env returns the variables the stage's ENV instructions set.
func (s Stage) Env() map[string]string {
	out := make(map[string]string)
	for _, in := range s.Instructions {
		if in.Keyword != "ENV" {
			continue
		}
		for _, f := range strings.Fields(in.Args) {
			if k, v, ok := strings.Cut(f, "="); ok {
				out[k] = strings.Trim(v, `"'`)
			}
		}
	}
	return out
}

// Binaries maps the base name of each file the stage copies from another
// stage to the path it lands at.
func (s Stage) Binaries() map[string]string {
	out := make(map[string]string)
	for _, in := range s.Instructions {
		if in.Keyword != "COPY" {
			continue
		}
		f := strings.Fields(in.Args)
		from := slices.IndexFunc(f, func(s string) bool { return strings.HasPrefix(s, "--from=") })
		f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
		if from < 0 || len(f) < 2 {
			continue
		}
		dst := f[len(f)-1]
		for _, src := range f[:len(f)-1] {
			name := path.Base(src)
			if strings.HasSuffix(dst, "/") || len(f) > 2 {
				out[name] = path.Join(dst, name)
			} else {
				out[path.Base(dst)] = dst
			}
		}
	}
	return out
}

// Binary is what the checks know of one hookd binary.
type Binary struct {
	// Name is the binary's file name, such as "api".
	Name string
	// Package is its main package, such as "./cmd/api".
	Package string
	// Flags maps each "--flag" to its environment twin
	// (config.FlagSet.Names).
	Flags map[string]string
	// Check parses a command line (without the program name) and an
	// environment as the binary would, doing nothing else, and returns the
	// binary's complaint: an unknown subcommand, flag or bad value.
	Check func(args []string, getenv func(string) string) error
}

// pathDirs are where a bare program name is found in the runtime images
// hookd uses (distroless and Debian set PATH to these).
var pathDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// CheckDockerfile checks that the Dockerfile builds b's package with cgo
// off, copies the binary into the final stage, runs as a non-root user, and
// that its default command names a binary the image holds (and, when it is
// b, one b accepts).
func CheckDockerfile(df *Dockerfile, b Binary) []error {
	var errs []error
	built := false
	for _, st := range df.Stages[:len(df.Stages)-1] {
		for _, in := range st.Instructions {
			if in.Keyword != "RUN" || !strings.Contains(in.Args, "go build") {
				continue
			}
			f := strings.Fields(in.Args)
			if !slices.Contains(f, b.Package) && !slices.Contains(f, "./cmd/...") {
				continue
			}
			built = true
			if st.Env()["CGO_ENABLED"] != "0" && !strings.Contains(in.Args, "CGO_ENABLED=0") {
				errs = append(errs, fmt.Errorf("dockerfile line %d: builds %s without CGO_ENABLED=0", in.Line, b.Package))
			}
		}
	}
	if !built {
		errs = append(errs, fmt.Errorf("dockerfile: no build stage runs go build on %s", b.Package))
	}
	final := df.Final()
	bins := final.Binaries()
	if _, ok := bins[b.Name]; !ok {
		errs = append(errs, fmt.Errorf("dockerfile: the final stage does not copy the %s binary", b.Name))
	}
	user, _, _ := strings.Cut(lastArgs(final, "USER"), ":")
	if user == "" || user == "root" || user == "0" {
		errs = append(errs, fmt.Errorf("dockerfile: the final stage must set a non-root USER, got %q", lastArgs(final, "USER")))
	}
	ep, cmd, err := df.Defaults()
	if err != nil {
		return append(errs, err)
	}
	cmd = append(ep, cmd...)
	if len(cmd) == 0 {
		return append(errs, errors.New("dockerfile: the final stage has no ENTRYPOINT or CMD"))
	}
	if err := findBinary(cmd[0], bins); err != nil {
		errs = append(errs, fmt.Errorf("dockerfile: ENTRYPOINT/CMD: %w", err))
	} else if path.Base(cmd[0]) == b.Name {
		if err := checkArgs(b, cmd[1:], nil); err != nil {
			errs = append(errs, fmt.Errorf("dockerfile: ENTRYPOINT/CMD %q: %w", cmd, err))
		}
	}
	return errs
}

// Defaults returns the final stage's ENTRYPOINT and CMD.
func (df *Dockerfile) Defaults() (entrypoint, cmd []string, err error) {
	final := df.Final()
	if entrypoint, err = final.Exec("ENTRYPOINT"); err != nil {
		return nil, nil, fmt.Errorf("dockerfile: %w", err)
	}
	if cmd, err = final.Exec("CMD"); err != nil {
		return nil, nil, fmt.Errorf("dockerfile: %w", err)
	}
	return entrypoint, cmd, nil
}

// CheckCompose checks every compose service that runs the Dockerfile's
// image: the program it runs must be in the image, and when that program is
// b, every environment variable set must be the twin of one of b's flags,
// every --flag must be one of b's, and b must accept the command and
// environment (so the subcommand is real and the values parse). It returns
// the names of the services that run b.
func CheckCompose(c *Compose, df *Dockerfile, b Binary) (services []string, errs []error) {
	bins := df.Final().Binaries()
	ep, cmd, err := df.Defaults()
	if err != nil {
		return nil, []error{err}
	}
	twins := make(map[string]bool, len(b.Flags))
	for _, env := range b.Flags {
		if env != "" {
			twins[env] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		svc := c.Services[name]
		if !svc.Built() {
			continue
		}
		argv := svc.Argv(ep, cmd)
		if len(argv) == 0 {
			errs = append(errs, fmt.Errorf("service %s: runs nothing", name))
			continue
		}
		if err := findBinary(argv[0], bins); err != nil {
			errs = append(errs, fmt.Errorf("service %s: %w", name, err))
			continue
		}
		if path.Base(argv[0]) != b.Name {
			continue
		}
		services = append(services, name)
		for _, k := range slices.Sorted(maps.Keys(svc.Environment)) {
			if !twins[k] {
				errs = append(errs, fmt.Errorf("service %s: environment variable %s is not the twin of any %s flag", name, k, b.Name))
			}
		}
		for _, a := range argv[1:] {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if _, ok := b.Flags["--"+flag]; !ok {
				errs = append(errs, fmt.Errorf("service %s: --%s is not one of %s's flags", name, flag, b.Name))
			}
		}
		if err := checkArgs(b, argv[1:], svc.Environment); err != nil {
			errs = append(errs, fmt.Errorf("service %s: %s %q: %w", name, b.Name, argv[1:], err))
		}
	}
	return services, errs
}

// Argv is what the service runs in an image with the given ENTRYPOINT and
// CMD, by compose's rules: a service entrypoint replaces the image's and
// drops its CMD; a service command replaces the CMD.
func (s Service) Argv(entrypoint, cmd []string) []string {
	if len(s.Entrypoint) > 0 {
		entrypoint, cmd = s.Entrypoint, nil
	}
	if len(s.Command) > 0 {
		cmd = s.Command
	}
	return append(slices.Clone(entrypoint), cmd...)
}

func checkArgs(b Binary, args []string, env map[string]string) error {
	if slices.Contains(args, "--") {
		return errors.New(`"--" cannot be checked`)
	}
	return b.Check(args, func(k string) string { return interpolate(env[k]) })
}

// defaultRef matches a compose ${NAME:-default} or ${NAME-default}.
var defaultRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}`)

// interpolate resolves compose defaults, so the binary parses the value the
// container gets when the variable is unset. Other references stay as
// written.
func interpolate(v string) string {
	return defaultRef.ReplaceAllString(v, "$1")
}

// findBinary checks that prog names a binary the image holds, by absolute
// path or by a name found on the runtime PATH.
func findBinary(prog string, bins map[string]string) error {
	at, ok := bins[path.Base(prog)]
	switch {
	case !ok:
		return fmt.Errorf("runs %q, which the image does not hold (it holds %v)", prog, slices.Sorted(maps.Keys(bins)))
	case path.IsAbs(prog) && prog != at:
		return fmt.Errorf("runs %s, but the image holds it at %s", prog, at)
	case !path.IsAbs(prog) && !slices.Contains(pathDirs, path.Dir(at)):
		return fmt.Errorf("runs %s by name, but the image holds it at %s, off the PATH", prog, at)
	}
	return nil
}

func lastArgs(s Stage, keyword string) string {
	out := ""
	for _, in := range s.Instructions {
		if in.Keyword == keyword {
			out = in.Args
		}
	}
	return out
}
