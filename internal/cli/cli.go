// Package cli is hookd's operator command line: the cobra command tree of
// the hookd binary, its login file, its table and JSON output and its exit
// codes. Every command calls the API through the Go SDK (sdk/go) with the
// token the user logged in with, so the token's scope decides what a
// command may do.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	hookd "github.com/hookd/hookd/sdk/go"
)

// The exit codes of the hookd binary.
const (
	// ExitOK is a command that did what it was asked.
	ExitOK = 0
	// ExitError is a refusal of the API (its problem's title, detail and
	// field errors are printed) or any other failure.
	ExitError = 1
	// ExitUsage is a command line that names no command, an unknown one,
	// a bad flag or argument.
	ExitUsage = 2
)

// Env is what a run of the command line gets from its process: the
// arguments aside, everything a test replaces.
type Env struct {
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// ConfigDir is the user's configuration directory (when nil, the one
	// os.UserConfigDir names, read from Getenv); the login file is
	// hookd/config.json in it.
	ConfigDir func() (string, error)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Logger receives diagnostics (nothing when nil).
	Logger *slog.Logger
}

// UsageError is a bad command line: exit code 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usagef returns a *UsageError.
func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Run runs the command line args (without the program's name).
func Run(ctx context.Context, args []string, env Env) error {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.ConfigDir == nil {
		getenv := env.Getenv
		env.ConfigDir = func() (string, error) { return userConfigDir(runtime.GOOS, getenv) }
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	a := &app{env: env}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err != nil && !a.started {
		// cobra failed before any command ran: an unknown command, a bad
		// flag or a wrong number of arguments.
		var ue *UsageError
		if !errors.As(err, &ue) {
			err = &UsageError{Err: err}
		}
	}
	return err
}

// ExitCode maps Run's error to the process's exit code, printing it to
// stderr: the API's problem with its title, detail and field errors.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "hookd: %v\nRun 'hookd --help' for usage.\n", err)
		return ExitUsage
	}
	var herr *hookd.Error
	if errors.As(err, &herr) {
		fmt.Fprint(stderr, describeProblem(herr))
		return ExitError
	}
	fmt.Fprintf(stderr, "hookd: %v\n", err)
	return ExitError
}

// describeProblem is the text of an API refusal: status and title, then
// the detail and each field at fault on lines of their own.
func describeProblem(e *hookd.Error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "hookd: %d %s\n", e.Status, e.Title)
	if e.Detail != "" {
		fmt.Fprintf(&b, "  %s\n", e.Detail)
	}
	for _, f := range e.Errors {
		fmt.Fprintf(&b, "  %s: %s\n", f.Field, f.Message)
	}
	return b.String()
}

// app is one run's state: the global flags and the client they lead to.
type app struct {
	env     Env
	started bool // a command's RunE was reached (errors after it are not usage errors)

	apiFlag string
	output  string // "", "table" or "json"
	asJSON  bool

	client *hookd.Client
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "hookd",
		Short: "Operate a hookd webhook dispatch service from the command line",
		Long: `hookd drives a hookd API with the token you logged in with (hookd login),
or with HOOKD_API and HOOKD_TOKEN from the environment.

Output is a table on a terminal and JSON with --json or when piped.
Exit codes: 0 ok, 1 the API refused (its problem is printed) or another
failure, 2 a usage error.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return usagef("a command is needed")
		},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.started = true
			switch a.output {
			case "", "table", "json":
			default:
				return usagef("--output is table or json, not %q", a.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.apiFlag, "api", "", "the API's base URL (default $HOOKD_API, then the login file's)")
	pf.StringVarP(&a.output, "output", "o", "", "table or json (default: table on a terminal, json otherwise)")
	pf.BoolVar(&a.asJSON, "json", false, "print JSON (as --output json)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(
		a.loginCommand(),
		a.endpointsCommand(),
		a.messagesCommand(),
		a.deliveriesCommand(),
		a.recoverCommand(),
		a.breakersCommand(),
		a.classesCommand(),
		a.tokensCommand(),
		a.portalSessionCommand(),
		a.eventTypesCommand(),
		a.tailCommand(),
		a.listenCommand(),
		a.mcpCommand(),
	)
	return root
}

// group returns a command that only holds subcommands: run alone or with
// an unknown subcommand, it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			_ = cmd.Help()
			return usagef("%s needs a subcommand", cmd.CommandPath())
		},
	}
	c.AddCommand(subs...)
	return c
}

// noArgs, exactArgs and the like are cobra's argument checks as usage
// errors.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

func exactArgs(n int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), n, strings.Join(names, ", "), len(args))
		}
		return nil
	}
}

// api returns the client of the configured API, made once.
func (a *app) api() (*hookd.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	cfg, err := a.resolveConfig()
	if err != nil {
		return nil, err
	}
	c, err := hookd.New(cfg.API, cfg.Token, hookd.WithUserAgent("hookd-cli"))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	a.client = c
	return c, nil
}

// printer returns the output of this run: JSON when asked for or when
// stdout is not a terminal.
func (a *app) printer() *printer {
	asJSON := a.asJSON || a.output == "json"
	if !asJSON && a.output == "" {
		asJSON = !isTerminal(a.env.Stdout)
	}
	return &printer{out: a.env.Stdout, json: asJSON}
}

// isTerminal reports whether w is a terminal: tables are for people.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
