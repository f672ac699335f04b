// Package docgen renders the parts of docs/ that mirror code (each
// binary's flags, the series it exports) and keeps each in a block of a
// document between two marker comments. go generate ./... rewrites the
// blocks; the binaries' tests fail while a committed block differs from
// what the code generates.
package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

// FlagTable renders flags as a table: flag, environment variable, default
// and meaning, one row per flag in binding order.
func FlagTable(flags []config.Flag) string {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, code(f.Env), code(f.Default), cell(f.Usage))
	}
	return b.String()
}

// SeriesTable renders a registry's families as a table: series, type,
// labels and help, sorted by name. The Go runtime and process collectors'
// families share one row.
func SeriesTable(cat telemetrytest.Catalogue) string {
	var b strings.Builder
	b.WriteString("| series | type | labels | meaning |\n|---|---|---|---|\n")
	runtime := false
	for _, name := range cat.Names() {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			runtime = true
			continue
		}
		f := cat[name]
		labels := make([]string, len(f.Labels))
		for i, l := range f.Labels {
			labels[i] = code(l)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, f.Type, strings.Join(labels, ", "), cell(f.Help))
	}
	if runtime {
		b.WriteString("| `go_*`, `process_*` | | | Go runtime and process collectors |\n")
	}
	return b.String()
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// Command is what regenerates every block.
const Command = "go generate ./..."

func begin(name string) string {
	return "<!-- generated: " + name + " (" + Command + "; do not edit by hand) -->\n"
}

func end(name string) string { return "<!-- end generated: " + name + " -->" }

// Block returns the text of the block name in doc.
func Block(doc, name string) (string, error) {
	i := strings.Index(doc, begin(name))
	if i < 0 {
		return "", fmt.Errorf("no line %q", strings.TrimSpace(begin(name)))
	}
	rest := doc[i+len(begin(name)):]
	j := strings.Index(rest, end(name))
	if j < 0 {
		return "", fmt.Errorf("no line %q", end(name))
	}
	return rest[:j], nil
}

// Splice returns doc with the block name's text replaced by content.
func Splice(doc, name, content string) (string, error) {
	old, err := Block(doc, name)
	if err != nil {
		return "", err
	}
	at := strings.Index(doc, begin(name)) + len(begin(name))
	return doc[:at] + content + doc[at+len(old):], nil
}

// Sync compares the block name of file with content; with update it
// rewrites the block instead. A file without the block is an error either
// way: the markers say where the block goes.
func Sync(file, name, content string, update bool) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("generated docs: %w", err)
	}
	doc := string(b)
	if update {
		out, err := Splice(doc, name, content)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(file), err)
		}
		return os.WriteFile(file, []byte(out), 0o644)
	}
	got, err := Block(doc, name)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(file), err)
	}
	if got != content {
		return fmt.Errorf("%s: the %s block is stale; run %s and commit the result. Generated:\n\n%s", filepath.Base(file), name, Command, content)
	}
	return nil
}
