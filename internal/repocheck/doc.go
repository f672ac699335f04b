// Package repocheck holds tests on the repository's tracked files
// themselves: what may be committed, and that the screenshots the docs
// show are tracked, shown and what their names say.
package repocheck
