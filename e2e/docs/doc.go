// Package docs holds no code: its tests check the repository's Markdown
// against what it describes. docs/configuration.md's table must be what
// `make config-table` prints from the built services, and every relative
// link of README.md and docs/ must lead to a file (and heading) that exists.
package docs
