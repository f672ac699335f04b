package config

import "runtime"

// PoolSize is a database pool's size for a process that was given none
// (0): perCore connections for each core Go schedules on (GOMAXPROCS,
// which follows the container's CPU limit), within [floor, ceiling]. A
// process uses its connections for about as long as it computes, so
// they scale with its cores; the ceiling keeps a fleet of large hosts
// within a stock server's max_connections. Given is returned unchanged
// when it is not 0.
func PoolSize(given, perCore, floor, ceiling int) int {
	if given != 0 {
		return given
	}
	return min(max(perCore*runtime.GOMAXPROCS(0), floor), ceiling)
}

// DispatcherPoolSize is a dispatcher's pool (--db-max-conns, 0: from the
// cores): 2 per core, 12 to 20. A dispatcher mostly waits on endpoints,
// and what it asks of the database (fetches, completions, breaker flushes,
// loads; the ledger has connections of its own) is bounded by the
// server's cores more than by its own: the ceiling keeps four dispatchers
// of any size, with their ledger's and listener's, within a stock
// server's max_connections (100).
func DispatcherPoolSize(given int) int { return PoolSize(given, 2, 12, 20) }

// APIPoolSize is an api's pool (--db-max-conns, 0: from the cores): 2
// per core, 8 to 20. Accepted messages share group commits, so an api
// needs few connections at once.
func APIPoolSize(given int) int { return PoolSize(given, 2, 8, 20) }
