package deploycheck

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// Dockerfile is a Dockerfile parsed by BuildKit.
type Dockerfile struct {
	Stages []instructions.Stage
}

// LoadDockerfile reads and parses a Dockerfile.
func LoadDockerfile(file string) (*Dockerfile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read dockerfile: %w", err)
	}
	return ParseDockerfile(string(b))
}

// ParseDockerfile parses Dockerfile text into its build stages.
func ParseDockerfile(text string) (*Dockerfile, error) {
	res, err := parser.Parse(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse dockerfile: %w", err)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("parse dockerfile: %w", err)
	}
	if len(stages) == 0 {
		return nil, errors.New("parse dockerfile: no FROM")
	}
	return &Dockerfile{Stages: stages}, nil
}

// Image is one build target: a stage and what the checks read of it.
type Image struct {
	Stage *instructions.Stage
	// Entrypoint and Cmd are its ENTRYPOINT and CMD; a shell form runs
	// under /bin/sh -c.
	Entrypoint, Cmd []string
	// Holds maps the base name of every file copied from another stage to
	// the path it lands at.
	Holds map[string]string
	// User is its last USER.
	User string
}

// Image returns the image a build target makes: the stage named target,
// or the last stage (docker build's default) when target is "".
func (d *Dockerfile) Image(target string) (*Image, error) {
	i := len(d.Stages) - 1
	if target != "" {
		i = slices.IndexFunc(d.Stages, func(s instructions.Stage) bool { return s.Name == target })
		if i < 0 {
			return nil, fmt.Errorf("dockerfile: no stage %q", target)
		}
	}
	st := &d.Stages[i]
	img := &Image{Stage: st, Holds: map[string]string{}}
	for _, c := range st.Commands {
		switch c := c.(type) {
		case *instructions.EntrypointCommand:
			img.Entrypoint, img.Cmd = shellForm(c.ShellDependantCmdLine), nil
		case *instructions.CmdCommand:
			img.Cmd = shellForm(c.ShellDependantCmdLine)
		case *instructions.UserCommand:
			img.User = c.User
		case *instructions.CopyCommand:
			if c.From == "" {
				continue
			}
			for _, src := range c.SourcePaths {
				name := path.Base(src)
				if strings.HasSuffix(c.DestPath, "/") || len(c.SourcePaths) > 1 {
					img.Holds[name] = path.Join(c.DestPath, name)
				} else {
					img.Holds[path.Base(c.DestPath)] = c.DestPath
				}
			}
		}
	}
	return img, nil
}

func shellForm(c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell {
		return []string{"/bin/sh", "-c", strings.Join(c.CmdLine, " ")}
	}
	return slices.Clone(c.CmdLine)
}

// pathDirs are the runtime images' PATH (distroless and Debian alike).
var pathDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Find checks that the image holds prog, named by absolute path or found
// on the PATH, and returns the base name of the binary it runs.
func (img *Image) Find(prog string) (string, error) {
	at, ok := img.Holds[path.Base(prog)]
	switch {
	case !ok:
		return "", fmt.Errorf("runs %q, which the image does not hold (it holds %v)", prog, slices.Sorted(maps.Keys(img.Holds)))
	case path.IsAbs(prog) && prog != at:
		return "", fmt.Errorf("runs %s, but the image holds it at %s", prog, at)
	case !path.IsAbs(prog) && !slices.Contains(pathDirs, path.Dir(at)):
		return "", fmt.Errorf("runs %s by name, but the image holds it at %s, off the PATH", prog, at)
	}
	return path.Base(prog), nil
}

// Builds checks that a stage other than the shipped one runs go build on
// pkg with cgo off, so the binary runs on a distroless base.
func (d *Dockerfile) Builds(pkg string) error {
	for _, st := range d.Stages[:len(d.Stages)-1] {
		cgoOff := false
		for _, c := range st.Commands {
			switch c := c.(type) {
			case *instructions.EnvCommand:
				for _, kv := range c.Env {
					if kv.Key == "CGO_ENABLED" {
						cgoOff = kv.Value == "0"
					}
				}
			case *instructions.RunCommand:
				words := strings.Fields(strings.Join(c.CmdLine, " "))
				if !slices.Contains(words, "build") || !slices.Contains(words, pkg) {
					continue
				}
				if !cgoOff && !slices.Contains(words, "CGO_ENABLED=0") {
					return fmt.Errorf("dockerfile: stage %s builds %s without CGO_ENABLED=0", st.Name, pkg)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("dockerfile: no build stage runs go build on %s", pkg)
}
