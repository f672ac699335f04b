package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	hookd "github.com/hookd/hookd/sdk/go"
)

func (a *app) loginCommand() *cobra.Command {
	var tokenStdin bool
	c := &cobra.Command{
		Use:   "login --api URL",
		Short: "Store the API's address and a token in the user's config directory",
		Long: `login checks the token against the API, then stores the address and the
token in hookd/config.json of the user's config directory (file mode 0600).
The token is read from standard input (its first line), or from HOOKD_TOKEN
when set. HOOKD_API and HOOKD_TOKEN override the stored values on every
command.`,
		Example: `  printf '%s\n' "$TOKEN" | hookd login --api http://127.0.0.1:8080`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api := a.apiFlag
			if api == "" {
				api = a.env.Getenv("HOOKD_API")
			}
			if api == "" {
				return usagef("login needs --api URL (or HOOKD_API)")
			}
			token := a.env.Getenv("HOOKD_TOKEN")
			if token == "" || tokenStdin {
				var err error
				if token, err = a.readToken(); err != nil {
					return err
				}
			}
			client, err := hookd.New(api, token, hookd.WithUserAgent("hookd-cli"))
			if err != nil {
				return &UsageError{Err: err}
			}
			// Any token may read the event type catalogue: a cheap check
			// that the address and the token are right.
			for _, err := range client.EventTypes.All(cmd.Context(), &hookd.EventTypeFilter{Limit: hookd.Ptr(1)}) {
				if err != nil {
					var herr *hookd.Error
					if errors.As(err, &herr) {
						return err
					}
					return fmt.Errorf("reach %s: %w", api, err)
				}
				break
			}
			path, err := a.writeConfig(config{API: api, Token: token})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "Logged in to %s; stored in %s\n", api, path)
			return nil
		},
	}
	c.Flags().BoolVar(&tokenStdin, "token-stdin", false, "read the token from standard input even when HOOKD_TOKEN is set")
	return c
}

// readToken reads the token from standard input: typed at a prompt, not
// echoed, on a terminal; its first line otherwise.
func (a *app) readToken() (string, error) {
	if f, ok := a.env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(a.env.Stderr, "Token: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.env.Stderr)
		if err != nil {
			return "", fmt.Errorf("read the token: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", usagef("no token typed")
	}
	line, err := bufio.NewReader(a.env.Stdin).ReadString('\n')
	if t := strings.TrimSpace(line); t != "" {
		return t, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the token: %w", err)
	}
	return "", usagef("no token on standard input")
}
