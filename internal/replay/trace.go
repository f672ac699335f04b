package replay

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/breaker"
)

// TraceHeader is the header line of a trace with phase labels; the phase
// column is optional.
const TraceHeader = "ts,outcome,phase"

// TraceError is a problem with one line of a trace file.
type TraceError struct {
	// Line is the 1-based line number.
	Line int
	// Err says what is wrong with it.
	Err error
}

// Error returns "line N: problem".
func (e *TraceError) Error() string {
	return fmt.Sprintf("line %d: %v", e.Line, e.Err)
}

// Unwrap returns the problem.
func (e *TraceError) Unwrap() error { return e.Err }

// ParseTrace reads a CSV trace: a header "ts,outcome" or "ts,outcome,phase",
// then one row per request. ts is seconds as a decimal number (digits, an
// optional fraction, no sign or exponent; digits past nanoseconds are
// dropped), outcome is success, failure, ignore or auth_failure, and phase
// is a free-text label. Rows must be in time order (equal times are
// allowed). The first malformed line stops the parse with a *TraceError
// naming it.
func ParseTrace(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(bufio.NewReaderSize(r, 64<<10))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true

	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &TraceError{Line: 1, Err: errors.New(`missing header "ts,outcome[,phase]": the trace is empty`)}
	}
	if err != nil {
		return nil, csvError(err)
	}
	columns, names, err := parseHeader(header)
	if err != nil {
		line, _ := cr.FieldPos(0)
		return nil, &TraceError{Line: line, Err: err}
	}

	var (
		rows   []Row
		labels = map[string]string{}
		prev   time.Duration
	)
	for {
		record, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		if len(record) != columns {
			return nil, &TraceError{Line: line, Err: fmt.Errorf("want %d fields (%s), got %d", columns, names, len(record))}
		}
		ts, err := ParseSeconds(record[0])
		if err != nil {
			return nil, &TraceError{Line: line, Err: fmt.Errorf("ts %q: %w", record[0], err)}
		}
		if len(rows) > 0 && ts < prev {
			return nil, &TraceError{Line: line, Err: fmt.Errorf("ts %s is before the previous row's %s: %w", record[0], formatSeconds(prev), ErrUnsorted)}
		}
		o, err := breaker.ParseOutcome(record[1])
		if err != nil {
			return nil, &TraceError{Line: line, Err: fmt.Errorf("outcome %q: must be success, failure, ignore or auth_failure", record[1])}
		}
		row := Row{TS: ts, Outcome: o}
		if columns == 3 {
			// Share one string per label: less memory, and the replay
			// loop compares labels by pointer first.
			label, ok := labels[record[2]]
			if !ok {
				label = strings.Clone(record[2])
				labels[label] = label
			}
			row.Phase = label
		}
		rows = append(rows, row)
		prev = ts
	}
}

// parseHeader returns the number of columns a header names and their names.
func parseHeader(header []string) (columns int, names string, err error) {
	trimmed := make([]string, len(header))
	for i, h := range header {
		trimmed[i] = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
	}
	switch names = strings.Join(trimmed, ","); names {
	case "ts,outcome":
		return 2, names, nil
	case "ts,outcome,phase":
		return 3, names, nil
	}
	return 0, "", fmt.Errorf(`missing header "ts,outcome[,phase]": found %q`, strings.Join(header, ","))
}

// csvError turns an encoding/csv error into a *TraceError with its line.
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &TraceError{Line: pe.Line, Err: pe.Err}
	}
	return fmt.Errorf("read trace: %w", err)
}

// ParseSeconds parses a non-negative decimal number of seconds, such as
// "12", "0.25" or "1767225600.123456789", exactly to the nanosecond; further
// fraction digits are dropped.
func ParseSeconds(s string) (time.Duration, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && (!dot || frac == "") || !digits(whole) || !digits(frac) {
		return 0, errors.New("must be a number of seconds such as 12.5")
	}
	var sec int64
	if whole != "" {
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || n > math.MaxInt64/int64(time.Second)-1 {
			return 0, errors.New("is too large")
		}
		sec = n
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	var nsec int64
	if frac != "" {
		n, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		nsec = n
	}
	return time.Duration(sec*int64(time.Second) + nsec), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// formatSeconds formats d as decimal seconds with no trailing zeros, the
// form ParseSeconds reads back exactly: "30", "30.01", "-0.5".
func formatSeconds(d time.Duration) string {
	sign := ""
	n := int64(d)
	if n < 0 {
		sign, n = "-", -n
	}
	sec, nsec := n/int64(time.Second), n%int64(time.Second)
	if nsec == 0 {
		return sign + strconv.FormatInt(sec, 10)
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", nsec), "0")
	return sign + strconv.FormatInt(sec, 10) + "." + frac
}

// WriteTrace writes rows as a CSV trace that ParseTrace reads back to the
// same rows: the header "ts,outcome,phase" when any row has a phase label,
// "ts,outcome" otherwise.
func WriteTrace(w io.Writer, rows []Row) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	labelled := false
	for _, r := range rows {
		if r.Phase != "" {
			labelled = true
			break
		}
	}
	cw := csv.NewWriter(bw)
	header := []string{"ts", "outcome"}
	if labelled {
		header = append(header, "phase")
	}
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	record := make([]string, len(header))
	for _, r := range rows {
		record[0] = formatSeconds(r.TS)
		record[1] = r.Outcome.String()
		if labelled {
			record[2] = r.Phase
		}
		if err := cw.Write(record); err != nil {
			return fmt.Errorf("write trace: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	return nil
}
