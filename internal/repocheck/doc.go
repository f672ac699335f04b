// Package repocheck holds tests on the repository's tracked files
// themselves: what may be committed.
package repocheck
