// Package migrations holds hookd's numbered SQL migrations, embedded in the
// binaries so `api migrate` and `dispatcher migrate` need no files on disk.
//
// Files are named NNNN_description.sql and applied in numeric order, each in its
// own transaction. River's own migrations run in the same step (see
// store.Migrate).
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
