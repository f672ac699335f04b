// Package config binds command-line flags to environment variables for both
// binaries: every flag has an environment twin, flags win over the
// environment, --help lists each with its twin and default, and a bad value
// is a one-line UsageError.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// UsageError is a bad flag or environment value: the binary prints it and
// exits 2.
type UsageError struct {
	Msg string
}

func (e *UsageError) Error() string { return e.Msg }

// ErrHelp is returned by Parse when --help was asked for; the help text has
// been written.
var ErrHelp = flag.ErrHelp

// FlagSet is a flag.FlagSet whose flags read their defaults from the
// environment.
type FlagSet struct {
	fs       *flag.FlagSet
	getenv   func(string) string
	out      io.Writer
	synopsis string
	bindings []binding
}

type binding struct {
	name, env, def, usage string
	value                 flag.Value
}

// New returns a FlagSet for the command name; getenv supplies the
// environment and out receives help text.
func New(name, synopsis string, getenv func(string) string, out io.Writer) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &FlagSet{fs: fs, getenv: getenv, out: out, synopsis: synopsis}
	return f
}

// Var binds a flag.Value to --name and the environment variable env ("" for
// none). def is its default as text.
func (f *FlagSet) Var(v flag.Value, name, env, def, usage string) {
	if def != "" {
		if err := v.Set(def); err != nil {
			panic(fmt.Sprintf("config: default %q for --%s: %v", def, name, err))
		}
	}
	f.fs.Var(v, name, usage)
	f.bindings = append(f.bindings, binding{name: name, env: env, def: def, usage: usage, value: v})
}

// String binds a string flag.
func (f *FlagSet) String(name, env, def, usage string) *string {
	p := new(string)
	f.Var((*stringValue)(p), name, env, def, usage)
	return p
}

// Int binds an int flag.
func (f *FlagSet) Int(name, env string, def int, usage string) *int {
	p := new(int)
	f.Var((*intValue)(p), name, env, strconv.Itoa(def), usage)
	return p
}

// Int64 binds an int64 flag.
func (f *FlagSet) Int64(name, env string, def int64, usage string) *int64 {
	p := new(int64)
	f.Var((*int64Value)(p), name, env, strconv.FormatInt(def, 10), usage)
	return p
}

// Float binds a float64 flag.
func (f *FlagSet) Float(name, env string, def float64, usage string) *float64 {
	p := new(float64)
	f.Var((*floatValue)(p), name, env, strconv.FormatFloat(def, 'g', -1, 64), usage)
	return p
}

// Duration binds a Go-duration flag.
func (f *FlagSet) Duration(name, env string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	f.Var((*durationValue)(p), name, env, def.String(), usage)
	return p
}

// Bool binds a boolean flag.
func (f *FlagSet) Bool(name, env string, def bool, usage string) *bool {
	p := new(bool)
	f.Var((*boolValue)(p), name, env, strconv.FormatBool(def), usage)
	return p
}

// Parse applies the environment, then args. Errors are *UsageError, or
// ErrHelp after printing help.
func (f *FlagSet) Parse(args []string) error {
	for _, b := range f.bindings {
		if b.env == "" {
			continue
		}
		if v := f.getenv(b.env); v != "" {
			if err := b.value.Set(v); err != nil {
				return &UsageError{Msg: fmt.Sprintf("%s=%q: %v", b.env, v, err)}
			}
		}
	}
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.PrintHelp()
			return ErrHelp
		}
		return &UsageError{Msg: oneLine(err.Error())}
	}
	return nil
}

// Args returns the arguments left after the flags.
func (f *FlagSet) Args() []string { return f.fs.Args() }

// Names lists every flag as "--name" with its environment twin: the
// contract deployment manifests are checked against.
func (f *FlagSet) Names() map[string]string {
	out := make(map[string]string, len(f.bindings))
	for _, b := range f.bindings {
		out["--"+b.name] = b.env
	}
	return out
}

// Flag describes one bound flag: its name without dashes, its environment
// twin ("" for none), its default as text and its usage line.
type Flag struct {
	Name, Env, Default, Usage string
}

// Flags lists every flag in the order it was bound: the source of the
// configuration tables in docs/configuration.md.
func (f *FlagSet) Flags() []Flag {
	out := make([]Flag, len(f.bindings))
	for i, b := range f.bindings {
		out[i] = Flag{Name: b.name, Env: b.env, Default: b.def, Usage: b.usage}
	}
	return out
}

// PrintHelp writes the synopsis and every flag with its twin and default.
func (f *FlagSet) PrintHelp() {
	fmt.Fprintf(f.out, "%s\n\nFlags (each also read from the environment variable shown):\n", f.synopsis)
	tw := tabwriter.NewWriter(f.out, 2, 4, 2, ' ', 0)
	for _, b := range f.bindings {
		env := b.env
		if env == "" {
			env = "-"
		}
		def := b.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  --%s\t%s\tdefault %s\t%s\n", b.name, env, def, b.usage)
	}
	_ = tw.Flush()
}

// Invalid returns a UsageError for a value that parsed but is not allowed.
func Invalid(flagName, env, format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf("--%s (%s): %s", flagName, env, fmt.Sprintf(format, args...))}
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("must be an integer")
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type int64Value int64

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("must be an integer")
	}
	*v = int64Value(n)
	return nil
}
func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }

type floatValue float64

func (v *floatValue) Set(s string) error {
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("must be a number")
	}
	*v = floatValue(n)
	return nil
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("must be a Go duration such as 500ms, 15s or 5m")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("must be true or false")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
