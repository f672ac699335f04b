package deploycheck

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// LoadCompose loads a compose file as docker compose would, with env as
// the environment its ${VAR} references read: schema validation,
// interpolation, merge keys and normalisation are compose-go's. env is
// copied: the loader writes to the map it is given.
func LoadCompose(file string, content []byte, env map[string]string) (*types.Project, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("compose file: %w", err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs, Content: content}},
		Environment: maps.Clone(env),
	}, func(o *loader.Options) { o.SetProjectName("hookd", true) })
	if err != nil {
		return nil, fmt.Errorf("load compose file: %w", err)
	}
	return p, nil
}

// ComposeRun is one compose service that runs a program from an image the
// Dockerfile builds.
type ComposeRun struct {
	Service string
	// Program is the base name of the binary it runs.
	Program string
	Args    []string
	Env     map[string]string
	Config  types.ServiceConfig
}

// ComposeRuns returns, in service name order, what every service built
// from df runs, and an error for a service whose program the image it
// builds does not hold.
func ComposeRuns(p *types.Project, df *Dockerfile) ([]ComposeRun, []error) {
	var (
		out  []ComposeRun
		errs []error
	)
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		svc := p.Services[name]
		if svc.Build == nil {
			continue
		}
		img, err := df.Image(svc.Build.Target)
		if err != nil {
			errs = append(errs, fmt.Errorf("service %s: %w", name, err))
			continue
		}
		argv := Argv(img.Entrypoint, img.Cmd, svc.Entrypoint, svc.Command)
		if len(argv) == 0 {
			errs = append(errs, fmt.Errorf("service %s: runs nothing", name))
			continue
		}
		prog, err := img.Find(argv[0])
		if err != nil {
			errs = append(errs, fmt.Errorf("service %s: %w", name, err))
			continue
		}
		env := map[string]string{}
		for k, v := range svc.Environment {
			if v != nil {
				env[k] = *v
			} else {
				env[k] = ""
			}
		}
		out = append(out, ComposeRun{Service: name, Program: prog, Args: argv[1:], Env: env, Config: svc})
	}
	return out, errs
}
