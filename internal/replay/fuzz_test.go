package replay_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/replay"
)

// FuzzParseTrace checks that ParseTrace never panics, that every error it
// returns names a line, that the rows it accepts are in time order and
// replay cleanly, and that writing them out and parsing again gives the
// same rows.
func FuzzParseTrace(f *testing.F) {
	f.Add([]byte("ts,outcome\n0,success\n0.01,failure\n"))
	f.Add([]byte("ts,outcome,phase\n0,success,base\n10,failure,outage\n10,ignore,outage\n12.5,auth_failure,\"a, b\"\n"))
	f.Add([]byte("ts,outcome\n2,success\n1,success\n"))
	f.Add([]byte("ts,outcome\n1e3,boom\n"))
	f.Add([]byte("0,success\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := replay.ParseTrace(bytes.NewReader(data))
		if err != nil {
			var te *replay.TraceError
			require.True(t, errors.As(err, &te), "%v", err)
			require.Positive(t, te.Line)
			return
		}
		for i := 1; i < len(rows); i++ {
			require.LessOrEqual(t, rows[i-1].TS, rows[i].TS)
		}
		_, err = replay.Replay(rateConfig(), rows, replay.Options{})
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, replay.WriteTrace(&buf, rows))
		again, err := replay.ParseTrace(&buf)
		require.NoError(t, err, "%q", buf.String())
		require.Equal(t, len(rows), len(again))
		for i := range rows {
			require.Equal(t, rows[i].TS, again[i].TS)
			require.Equal(t, rows[i].Outcome, again[i].Outcome)
		}
	})
}
