// Package deploycheck reads hookd's deployment files with each tool's own
// parser (compose-go for docker-compose.yml, BuildKit for the Dockerfile,
// the Kubernetes API types for deploy/k8s, Prometheus' PromQL parser for
// alert rules and the dashboard), so that each binary's tests can hold them
// to what only hookd knows: its flags, their environment twins, and the
// series it exports. No Docker engine or cluster is needed.
//
// Its tests and the binaries' tests that use it are built without the race
// detector (//go:build !race): the parsers cost minutes of CPU to compile
// with it and run none of hookd's concurrent code; make test runs them in a
// go test of their own.
package deploycheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Binary is what the checks know of one hookd binary.
type Binary struct {
	// Name is the binary's file name in the image, such as "api".
	Name string
	// Flags maps each "--flag" to its environment twin (config.FlagSet.Names).
	Flags map[string]string
	// Parse parses a command line (without the program name) and an
	// environment as the binary would, doing nothing else, and returns its
	// complaint: an unknown subcommand, flag or a value that does not parse.
	Parse func(args []string, getenv func(string) string) error
}

// CheckInvocation checks one way a deployment file runs b: every variable
// in env is the twin of one of b's flags, every --flag in args is one of
// b's, and b parses args and env.
func (b Binary) CheckInvocation(args []string, env map[string]string) []error {
	twins := map[string]bool{}
	for _, e := range b.Flags {
		if e != "" {
			twins[e] = true
		}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !twins[k] {
			errs = append(errs, fmt.Errorf("environment variable %s is not the twin of any %s flag", k, b.Name))
		}
	}
	for _, a := range args {
		if a == "--" {
			return append(errs, errors.New(`"--" cannot be checked`))
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := b.Flags["--"+name]; !ok {
			errs = append(errs, fmt.Errorf("--%s is not one of %s's flags", name, b.Name))
		}
	}
	if err := b.Parse(args, func(k string) string { return env[k] }); err != nil {
		errs = append(errs, fmt.Errorf("%s %q: %w", b.Name, args, err))
	}
	return errs
}

// Setting returns the value flag ("--name") gets from args or, when args
// do not set it, from its environment twin in env.
func (b Binary) Setting(flag string, args []string, env map[string]string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	v, ok := env[b.Flags[flag]]
	return v, ok && b.Flags[flag] != ""
}

// ServedPort returns the port of a listen address that others (a kubelet,
// Prometheus, a container on the compose network) must reach: it may not
// be on loopback.
func ServedPort(addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return 0, fmt.Errorf("%q listens on loopback, out of reach of other pods and containers", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return 0, fmt.Errorf("%q: port: %w", addr, err)
	}
	return n, nil
}

// Argv is what a container runs, by the rule Kubernetes and compose share:
// its entrypoint replaces the image's ENTRYPOINT and drops the image's CMD;
// its command (args) replaces the CMD.
func Argv(imageEntrypoint, imageCmd, entrypoint, command []string) []string {
	if len(entrypoint) > 0 {
		imageEntrypoint, imageCmd = entrypoint, nil
	}
	if len(command) > 0 {
		imageCmd = command
	}
	return slices.Concat(imageEntrypoint, imageCmd)
}

// RunFunc is a binary's run: main's whole work, with its inputs injected.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error

// ParseWithHelp makes a Binary.Parse of run: it runs run on args with
// --help appended, so run parses the subcommand, the flags and the
// environment and stops there, and isHelp tells that stop from a failure.
// The context is cancelled up front: were run ever to get past parsing, it
// would stop at once.
func ParseWithHelp(run RunFunc, isHelp func(error) bool) func(args []string, getenv func(string) string) error {
	return func(args []string, getenv func(string) string) error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := run(ctx, append(slices.Clone(args), "--help"), getenv, strings.NewReader(""), io.Discard, io.Discard)
		switch {
		case isHelp(err):
			return nil
		case err == nil:
			return errors.New("run did not stop at --help")
		}
		return err
	}
}
