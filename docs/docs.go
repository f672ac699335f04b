// Package docs holds hookd's documentation. Its Markdown files are
// embedded so that hookd mcp serves them to agents as resources, as they
// read in this checkout.
package docs

import "embed"

// Files holds every Markdown file of docs/.
//
//go:embed *.md
var Files embed.FS
