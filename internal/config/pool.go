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
