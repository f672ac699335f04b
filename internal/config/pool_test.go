package config_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/config"
)

// TestPoolSizeFollowsTheCores: a pool size given is kept; none (0) is
// perCore per core within the floor and the ceiling.
func TestPoolSizeFollowsTheCores(t *testing.T) {
	// Not parallel: it sets GOMAXPROCS.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		given, cores, want int
	}{
		{given: 7, cores: 2, want: 7},
		{cores: 1, want: 10},
		{cores: 2, want: 10},
		{cores: 4, want: 16},
		{cores: 8, want: 32},
		{cores: 64, want: 40},
	} {
		runtime.GOMAXPROCS(tc.cores)
		require.Equal(t, tc.want, config.PoolSize(tc.given, 4, 10, 40), "%d cores, given %d", tc.cores, tc.given)
	}
	// Four dispatchers of any size, each with the ledger's 2 and the
	// listener's 1, fit a stock server's 97 client connections.
	for _, cores := range []int{1, 2, 8, 64} {
		runtime.GOMAXPROCS(cores)
		require.LessOrEqual(t, 4*(config.DispatcherPoolSize(0)+3), 97, "%d cores", cores)
		require.GreaterOrEqual(t, config.APIPoolSize(0), 8)
	}
}
