// Package robustness is the robustness suite (docs/reliability.md): the
// whole stack, built with failpoints at every boundary between an effect
// and the commit that records it (make build-failpoints), under a seeded
// schedule of faults (package fault) and the traffic of depositors, an
// operator, Merritt's queue library and an external inventory (package
// traffic), watched from outside (package watch), and held to the model
// (package model) by an independent checker (package validate).
//
// `go test ./robustness/` (part of make test) runs one seed with part of
// the faults; make robustness runs a fixed list of seeds with every
// failpoint and fault each, the deliberately broken builds the checker
// must catch, and a run of mixed versions rolled to the current one.
// ROBUSTNESS_SEED=<n> replays a run. The same build's batcher also runs
// alone, killed at each failpoint of a 1,000-row batch's spawning
// (spawn_test.go).
package robustness
