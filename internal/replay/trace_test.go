package replay_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/replay"
)

func TestParseTrace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []replay.Row
	}{
		{"two columns", "ts,outcome\n0,success\n0.5,failure\n", []replay.Row{row(0, S, ""), row(0.5, F, "")}},
		{"phase column", "ts,outcome,phase\n1,ignore,base\n1,auth_failure,\"out, age\"\n", []replay.Row{row(1, I, "base"), row(1, A, "out, age")}},
		{"byte order mark, CRLF, spaces and blank lines", "\ufeffts, outcome\r\n\r\n 2.25, success\r\n", []replay.Row{row(2.25, S, "")}},
		{"header only", "ts,outcome\n", nil},
		{"epoch seconds to the nanosecond", "ts,outcome\n1767225600.123456789,success\n", []replay.Row{{TS: 1767225600*time.Second + 123456789, Outcome: S}}},
		{"digits past nanoseconds are dropped", "ts,outcome\n.0000000019,success\n", []replay.Row{{TS: 1, Outcome: S}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := replay.ParseTrace(strings.NewReader(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestParseTraceErrors: the first malformed line stops the parse, with its
// line number.
func TestParseTraceErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		line int
		want string
	}{
		{"empty", "", 1, `line 1: missing header "ts,outcome[,phase]": the trace is empty`},
		{"missing header", "0,success\n1,failure\n", 1, `line 1: missing header "ts,outcome[,phase]": found "0,success"`},
		{"unknown column", "ts,result\n", 1, `line 1: missing header "ts,outcome[,phase]": found "ts,result"`},
		{"unknown outcome", "ts,outcome\n0,success\n1,boom\n", 3, `line 3: outcome "boom": must be success, failure, ignore or auth_failure`},
		{"unsorted ts", "ts,outcome\n0,success\n2,success\n1.5,failure\n", 4, `line 4: ts 1.5 is before the previous row's 2: rows are not in time order`},
		{"bad ts", "ts,outcome\n1e3,success\n", 2, `line 2: ts "1e3": must be a number of seconds such as 12.5`},
		{"negative ts", "ts,outcome\n-1,success\n", 2, `line 2: ts "-1": must be a number of seconds such as 12.5`},
		{"empty ts", "ts,outcome\n,success\n", 2, `line 2: ts "": must be a number of seconds such as 12.5`},
		{"huge ts", "ts,outcome\n99999999999,success\n", 2, `line 2: ts "99999999999": is too large`},
		{"missing field", "ts,outcome,phase\n0,success,a\n1,success\n", 3, `line 3: want 3 fields (ts,outcome,phase), got 2`},
		{"extra field", "ts,outcome\n0,success,a\n", 2, `line 2: want 2 fields (ts,outcome), got 3`},
		{"bad quoting", "ts,outcome,phase\n0,success,\"a\n", 2, `line 2: extraneous or missing " in quoted-field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := replay.ParseTrace(strings.NewReader(tt.in))
			require.EqualError(t, err, tt.want)
			var te *replay.TraceError
			require.True(t, errors.As(err, &te))
			require.Equal(t, tt.line, te.Line)
		})
	}
}

func TestParseSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"12", 12 * time.Second, true},
		{"12.", 12 * time.Second, true},
		{".5", 500 * time.Millisecond, true},
		{"0.000000001", 1, true},
		{"9223372035.999999999", 9223372035999999999, true},
		{"9223372036", 0, false},
		{"", 0, false},
		{".", 0, false},
		{"+1", 0, false},
		{"1.2.3", 0, false},
		{" 1", 0, false},
		{"NaN", 0, false},
	}
	for _, tt := range tests {
		got, err := replay.ParseSeconds(tt.in)
		if !tt.ok {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}

// TestWriteTraceRoundTrips: WriteTrace's output parses back to the same
// rows, with a phase column only when some row has a label.
func TestWriteTraceRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		rows   []replay.Row
		header string
	}{
		{"labelled", []replay.Row{row(0, S, "base"), row(0.01, F, "out,age"), row(30.5, A, "\"q\""), row(30.5, I, "")}, "ts,outcome,phase\n"},
		{"unlabelled", []replay.Row{{TS: 1767225600*time.Second + 1, Outcome: F}}, "ts,outcome\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			require.NoError(t, replay.WriteTrace(&buf, tt.rows))
			require.True(t, strings.HasPrefix(buf.String(), tt.header), buf.String())
			got, err := replay.ParseTrace(&buf)
			require.NoError(t, err)
			require.Equal(t, tt.rows, got)
		})
	}
}
