package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFetchCostByWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		samples []fetchSample
		want    []map[string]float64
	}{
		{name: "shorter than a window", samples: []fetchSample{{AtS: 1, FetchCalls: 5, FetchMs: 5}}},
		{
			name: "per window, from the last window's end",
			samples: []fetchSample{
				{AtS: 5, FetchCalls: 10, FetchMs: 10, DeadTuples: 300},
				{AtS: 10, FetchCalls: 20, FetchMs: 30, DeadTuples: 100},
				{AtS: 15, FetchCalls: 30, FetchMs: 40, DeadTuples: 50},
				{AtS: 20, FetchCalls: 30, FetchMs: 40, DeadTuples: 70},
			},
			want: []map[string]float64{
				{"to_s": 10, "fetch_calls": 20, "max_dead_tuples": 300, "fetch_us_per_call": 1500},
				{"to_s": 20, "fetch_calls": 10, "max_dead_tuples": 70, "fetch_us_per_call": 1000},
			},
		},
		{
			name: "a window without fetches has no cost per call",
			samples: []fetchSample{
				{AtS: 10, FetchCalls: 0, FetchMs: 0, DeadTuples: 9},
			},
			want: []map[string]float64{{"to_s": 10, "fetch_calls": 0, "max_dead_tuples": 9}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, fetchCostByWindow(tt.samples, 10))
		})
	}
}
