// Package model is what the robustness checker holds the queue to: the
// job state machine of docs/queue-contract.md, spelled here on its own
// (the checker does not ask the code under test what is allowed), and a
// porcupine model of one job's state: a register that only fenced moves
// change, each from the state the job is in.
package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Job states as the queue spells them.
const (
	Pending      = "Pending"
	Held         = "Held"
	Estimating   = "Estimating"
	Provisioning = "Provisioning"
	Downloading  = "Downloading"
	Processing   = "Processing"
	Storing      = "Storing"
	Recording    = "Recording"
	Notify       = "Notify"
	Completed    = "Completed"
	Failed       = "Failed"
	Deleted      = "Deleted"
)

// moves is the contract's table of job moves: the stages' steps, an
// operator's hold, release, requeue and delete, and a failure from any
// live state.
var moves = map[string][]string{
	"":           {Pending}, // the job's creation
	Pending:      {Estimating, Held, Failed},
	Held:         {Pending, Deleted},
	Estimating:   {Provisioning, Failed},
	Provisioning: {Downloading, Provisioning, Failed},
	Downloading:  {Processing, Failed},
	Processing:   {Storing, Failed},
	Storing:      {Recording, Storing, Failed}, // stays while Merritt's storage service is unavailable
	Recording:    {Notify, Failed},
	Notify:       {Completed, Notify, Failed},
	Failed:       {Pending, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Deleted},
}

// Allowed reports whether the contract lets a job move from one state to
// another ("" is before the job exists).
func Allowed(from, to string) bool { return slices.Contains(moves[from], to) }

// CheckPath says which step of a sequence of states (each a state the job
// was seen in, in order, repeats allowed) the contract does not allow; ""
// when every step is allowed.
func CheckPath(states []string) string {
	prev := ""
	for _, s := range states {
		if s == prev && s != "" {
			continue
		}
		if !Allowed(prev, s) {
			return fmt.Sprintf("%s → %s (path %s)", show(prev), s, strings.Join(states, " → "))
		}
		prev = s
	}
	return ""
}

func show(s string) string {
	if s == "" {
		return "(created)"
	}
	return s
}

// Input is one operation on a job's state: a move a writer made (From,
// To, by Worker), or a read of the state by the watcher (Read).
type Input struct {
	Read   bool
	From   string
	To     string
	Worker string
}

// Output is what a read saw; a move's output is empty.
type Output struct {
	State string
}

// JobState is the porcupine model of one job's state. A move is legal
// only from the state the job is in, and only as the contract allows; a
// read must see the state the moves before it left.
var JobState = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(Input), output.(Output)
		if in.Read {
			return out.State == st, st
		}
		if in.From != st || !Allowed(in.From, in.To) {
			return false, st
		}
		return true, in.To
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		if in.Read {
			return "read → " + show(out.State)
		}
		return fmt.Sprintf("%s → %s by %s", show(in.From), in.To, in.Worker)
	},
	DescribeState: func(state any) string { return show(state.(string)) },
}
