package delivery_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

// fixed returns an injected random source that always returns f.
func fixed(f float64) func() float64 { return func() float64 { return f } }

// justBelowOne is the largest value a [0, 1) random source can return.
var justBelowOne = math.Nextafter(1, 0)

func TestParseSchedule(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		in      string
		want    delivery.Schedule
		wantErr string
	}{
		{name: "default", in: "0s,5s,5m,30m,2h,5h,10h,10h", want: delivery.DefaultSchedule},
		{name: "spaces", in: " 0s , 1m30s,2h ", want: delivery.Schedule{0, 90 * time.Second, 2 * time.Hour}},
		{name: "single", in: "0", want: delivery.Schedule{0}},
		{name: "sub-second", in: "250ms,1.5s", want: delivery.Schedule{250 * time.Millisecond, 1500 * time.Millisecond}},
		{name: "exactly 24h", in: "0s,24h", want: delivery.Schedule{0, 24 * time.Hour}},
		{name: "exactly 50 entries", in: strings.Repeat("1s,", 49) + "1s", want: repeat(time.Second, 50)},
		{name: "empty", in: "", wantErr: "parse schedule: empty"},
		{name: "blank", in: "   ", wantErr: "parse schedule: empty"},
		{name: "empty entry", in: "0s,,5s", wantErr: "entry 2 is empty"},
		{name: "trailing comma", in: "0s,5s,", wantErr: "entry 3 is empty"},
		{name: "unparsable", in: "0s,5s,soon", wantErr: `entry 3: time: invalid duration "soon"`},
		{name: "missing unit", in: "0s,5", wantErr: `entry 2: time: missing unit in duration "5"`},
		{name: "negative", in: "0s,5s,-5m", wantErr: "entry 3: negative delay -5m"},
		{name: "over 24h", in: "0s,24h0m1s", wantErr: "entry 2: 24h0m1s is longer than the 24h maximum"},
		{name: "51 entries", in: strings.Repeat("1s,", 50) + "1s", wantErr: "51 entries, at most 50 allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := delivery.ParseSchedule(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func repeat(d time.Duration, n int) delivery.Schedule {
	s := make(delivery.Schedule, n)
	for i := range s {
		s[i] = d
	}
	return s
}

func TestScheduleString(t *testing.T) {
	t.Parallel()

	tests := []struct {
		in   delivery.Schedule
		want string
	}{
		{delivery.DefaultSchedule, "0s,5s,5m,30m,2h,5h,10h,10h"},
		{delivery.Schedule{90 * time.Second, time.Hour + 10*time.Minute, time.Hour + 5*time.Second}, "1m30s,1h10m,1h0m5s"},
		{delivery.Schedule{250 * time.Millisecond}, "250ms"},
		{nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.in.String())
			if len(tt.in) > 0 {
				back, err := delivery.ParseSchedule(tt.in.String())
				require.NoError(t, err)
				require.Equal(t, tt.in, back)
			}
		})
	}
}

func TestNextDelayFullJitter(t *testing.T) {
	t.Parallel()
	s := delivery.DefaultSchedule

	tests := []struct {
		name     string
		attempts int
		rnd      float64
		want     time.Duration
		wantOK   bool
	}{
		{"first attempt is immediate", 0, 0.5, 0, true},
		{"rnd 0 gives 0", 1, 0, 0, true},
		{"rnd near 1 gives the step", 1, justBelowOne, 5 * time.Second, true},
		{"rnd half gives half", 2, 0.5, 150 * time.Second, true},
		{"last step", 7, justBelowOne, 10 * time.Hour, true},
		{"exhausted", 8, 0.5, 0, false},
		{"far past the end", 100, 0.5, 0, false},
		{"negative attempts", -1, 0.5, 0, false},
		{"rnd above range is clamped", 3, 1.5, 30 * time.Minute, true},
		{"rnd below range is clamped", 3, -0.5, 0, true},
		{"NaN rnd", 3, math.NaN(), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := s.NextDelay(tt.attempts, fixed(tt.rnd))
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestNextDelayStaysWithinStep(t *testing.T) {
	t.Parallel()
	s := delivery.DefaultSchedule
	for attempts := range len(s) {
		for i := range 101 {
			rnd := float64(i) / 100
			d, ok := s.NextDelay(attempts, fixed(rnd))
			require.True(t, ok)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, s.Step(attempts), "attempts=%d rnd=%v", attempts, rnd)
		}
	}
}

func TestStep(t *testing.T) {
	t.Parallel()
	s := delivery.DefaultSchedule

	tests := []struct {
		attempts int
		want     time.Duration
	}{
		{-1, 0},
		{0, 0},
		{1, 5 * time.Second},
		{4, 2 * time.Hour},
		{7, 10 * time.Hour},
		{8, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, s.Step(tt.attempts), "attempts=%d", tt.attempts)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)

	tests := []struct {
		name   string
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"absent", "", 0, false},
		{"blank", "  ", 0, false},
		{"seconds", "120", 2 * time.Minute, true},
		{"zero", "0", 0, true},
		{"padded", " 30 ", 30 * time.Second, true},
		{"leading zeros", "007", 7 * time.Second, true},
		{"huge saturates", "99999999999999999999999", time.Duration(math.MaxInt64), true},
		{"just past the duration range", "9223372037", time.Duration(math.MaxInt64), true},
		{"negative", "-5", 0, false},
		{"plus sign", "+5", 0, false},
		{"fraction", "1.5", 0, false},
		{"garbage", "soon", 0, false},
		{"http date", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"http date now", now.Format(http.TimeFormat), 0, true},
		{"http date in the past", now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
		{"rfc 850 date", now.Add(time.Hour).Format(time.RFC850), time.Hour, true},
		{"ansi c date", now.Add(time.Hour).Format(time.ANSIC), time.Hour, true},
		{"iso date is not http", now.Add(time.Hour).Format(time.RFC3339), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := delivery.ParseRetryAfter(tt.in, now)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)
	s := delivery.DefaultSchedule

	tests := []struct {
		name       string
		attempts   int
		status     int
		retryAfter string
		want       time.Duration
		wantOK     bool
	}{
		{"transport error uses jitter", 2, 0, "", 150 * time.Second, true},
		{"500 uses jitter", 2, 500, "", 150 * time.Second, true},
		{"500 ignores Retry-After", 2, 500, "3600", 150 * time.Second, true},
		{"429 without Retry-After uses jitter", 2, 429, "", 150 * time.Second, true},
		{"429 with invalid Retry-After uses jitter", 2, 429, "later", 150 * time.Second, true},
		{"429 Retry-After above step", 2, 429, "3600", time.Hour, true},
		{"503 Retry-After above step", 2, 503, "3600", time.Hour, true},
		{"429 Retry-After below step is raised to it", 2, 429, "10", 5 * time.Minute, true},
		{"503 Retry-After zero is raised to the step", 1, 503, "0", 5 * time.Second, true},
		{"Retry-After above 24h is capped", 1, 429, "172800", 24 * time.Hour, true},
		{"huge Retry-After is capped", 1, 429, "99999999999999999999", 24 * time.Hour, true},
		{"HTTP-date Retry-After", 1, 503, now.Add(2 * time.Hour).Format(http.TimeFormat), 2 * time.Hour, true},
		{"past HTTP-date Retry-After uses jitter", 2, 503, now.Add(-2 * time.Hour).Format(http.TimeFormat), 150 * time.Second, true},
		{"410 stops", 1, 410, "", 0, false},
		{"410 stops even with Retry-After", 1, 410, "60", 0, false},
		{"exhausted", 8, 500, "", 0, false},
		{"exhausted ignores Retry-After", 8, 429, "60", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := s.RetryDelay(tt.attempts, tt.status, tt.retryAfter, now, fixed(0.5))
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseSchedule(f *testing.F) {
	f.Add("0s,5s,5m,30m,2h,5h,10h,10h")
	f.Add("")
	f.Add("0s,,5s")
	f.Add("-1s")
	f.Add("25h")
	f.Add("1h0m0.5s, 250ms")
	f.Add(strings.Repeat("1s,", 50) + "1s")

	f.Fuzz(func(t *testing.T, in string) {
		s, err := delivery.ParseSchedule(in)
		if err != nil {
			require.Nil(t, s)
			return
		}
		require.NotEmpty(t, s)
		require.LessOrEqual(t, len(s), delivery.MaxScheduleLen)
		for _, d := range s {
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, delivery.MaxStep)
		}
		back, err := delivery.ParseSchedule(s.String())
		require.NoError(t, err, "String output parses back")
		require.Equal(t, s, back)
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)
	f.Add("120")
	f.Add("")
	f.Add("-5")
	f.Add("99999999999999999999999")
	f.Add("Tue, 04 Mar 2025 12:01:30 GMT")
	f.Add("Tuesday, 04-Mar-25 13:00:00 UTC")
	f.Add("Tue Mar  4 13:00:00 2025")

	f.Fuzz(func(t *testing.T, in string) {
		d, ok := delivery.ParseRetryAfter(in, now)
		if !ok {
			require.Zero(t, d)
			return
		}
		require.GreaterOrEqual(t, d, time.Duration(0))
		got, ok := delivery.DefaultSchedule.RetryDelay(3, http.StatusTooManyRequests, in, now, fixed(0.5))
		require.True(t, ok)
		require.GreaterOrEqual(t, got, delivery.DefaultSchedule.Step(3))
		require.LessOrEqual(t, got, delivery.MaxStep)
	})
}
