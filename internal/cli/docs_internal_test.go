package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// TestDocsShowEveryCommand: docs/cli.md has an example of every command
// (a line of a sh block that runs it), and each command's --help has
// an example too.
func TestDocsShowEveryCommand(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	var examples []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		examples = append(examples, strings.Split(block[1], "\n")...)
	}
	root := (&app{env: Env{Getenv: func(string) string { return "" }}}).rootCommand()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.HasSubCommands() {
				walk(sub)
				continue
			}
			path := sub.CommandPath()
			found := false
			for _, line := range examples {
				line = strings.TrimPrefix(strings.TrimSpace(line), "printf '%s\\n' \"$TOKEN\" | ")
				if line == path || strings.HasPrefix(line, path+" ") {
					found = true
				}
			}
			require.True(t, found, "docs/cli.md has no example of %q", path)
			require.Contains(t, sub.Example, path, "%q's --help has no example", path)
		}
	}
	walk(root)
}
