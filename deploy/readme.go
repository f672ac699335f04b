package deploy

import (
	"fmt"
	"strings"

	"github.com/hookd/hookd/internal/config"
)

// FlagTable renders flags as a README configuration table: flag,
// environment variable, default and meaning, one row per flag in binding
// order.
func FlagTable(flags []config.Flag) string {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		env, def := "", ""
		if f.Env != "" {
			env = "`" + f.Env + "`"
		}
		if f.Default != "" {
			def = "`" + f.Default + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, env, def, cell(f.Usage))
	}
	return b.String()
}

func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// TableAfter returns the first Markdown table after the line heading in doc:
// its lines, each trimmed, up to the first line that is not a table row.
func TableAfter(doc, heading string) (string, error) {
	lines := strings.Split(doc, "\n")
	at := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == heading {
			at = i
			break
		}
	}
	if at < 0 {
		return "", fmt.Errorf("no line %q", heading)
	}
	var b strings.Builder
	for _, l := range lines[at+1:] {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "|"):
			b.WriteString(l + "\n")
		case b.Len() > 0:
			return b.String(), nil
		case strings.HasPrefix(l, "#"):
			return "", fmt.Errorf("no table under %q", heading)
		}
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("no table under %q", heading)
	}
	return b.String(), nil
}

// ReplaceTableAfter returns doc with the first Markdown table after the line
// heading replaced by table.
func ReplaceTableAfter(doc, heading, table string) (string, error) {
	lines := strings.Split(doc, "\n")
	at := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == heading {
			at = i
			break
		}
	}
	if at < 0 {
		return "", fmt.Errorf("no line %q", heading)
	}
	start, end := -1, -1
	for i := at + 1; i < len(lines); i++ {
		isRow := strings.HasPrefix(strings.TrimSpace(lines[i]), "|")
		if isRow && start < 0 {
			start = i
		}
		if !isRow && start >= 0 {
			end = i
			break
		}
	}
	if start < 0 {
		return "", fmt.Errorf("no table under %q", heading)
	}
	if end < 0 {
		end = len(lines)
	}
	out := append(append(append([]string{}, lines[:start]...), strings.Split(strings.TrimRight(table, "\n"), "\n")...), lines[end:]...)
	return strings.Join(out, "\n"), nil
}
