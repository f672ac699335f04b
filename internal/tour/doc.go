// Package tour holds the tests of what a newcomer runs first: `make run`'s
// script (deploy/run-local.sh) in each way it finds PostgreSQL, and the
// README's tour, whose shell blocks are run as written against it.
package tour
