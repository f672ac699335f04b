package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
)

// printer writes a command's result: the API's answer as JSON, or a table
// of the columns that matter to an operator.
type printer struct {
	out  io.Writer
	json bool
}

// column is one column of a table: its header and how a row's cell is
// read.
type column[T any] struct {
	name string
	cell func(T) string
}

// printOne prints one object: JSON as the API answered it, or a table of
// one row.
func printOne[T any](p *printer, v T, cols []column[T]) error {
	if p.json {
		return p.writeJSON(v)
	}
	return writeTable(p.out, []T{v}, cols)
}

// printList prints a list: a JSON array, or a table with a row per item.
func printList[T any](p *printer, items []T, cols []column[T]) error {
	if p.json {
		if items == nil {
			items = []T{}
		}
		return p.writeJSON(items)
	}
	return writeTable(p.out, items, cols)
}

func (p *printer) writeJSON(v any) error {
	enc := json.NewEncoder(p.out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

func writeTable[T any](out io.Writer, items []T, cols []column[T]) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	fmt.Fprintln(tw, strings.Join(names, "\t"))
	for _, it := range items {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = oneLine(c.cell(it))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// oneLine keeps a cell on its line: tabs and newlines would break the
// table.
func oneLine(s string) string {
	s = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
	if s == "" {
		return "-"
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return fmtTime(*t)
}

func fmtStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func fmtInt(n *int) string {
	if n == nil {
		return ""
	}
	return strconv.Itoa(*n)
}

func fmtBool(b bool) string { return strconv.FormatBool(b) }

// isTerminalReader reports whether r is a terminal, where a prompt makes
// sense.
func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// writeJSONLine writes v as one line of JSON: tail's and listen's stream.
func (p *printer) writeJSONLine(v any) error {
	if err := json.NewEncoder(p.out).Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}
