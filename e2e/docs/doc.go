// Package docs holds no code: its tests check the repository's Markdown
// against what it describes. docs/configuration.md's table must be what
// `make config-table` prints from the built services; every relative link
// of README.md, BENCHMARKS.md and docs/ must lead to a file (and heading)
// that exists; every metric, alert, INGESTQ_* setting, RPC and make target
// a document names must exist (e2e/names finds them in the code and the
// configuration); and docs/tracing.md's metrics table must list every
// metric the code registers.
package docs
