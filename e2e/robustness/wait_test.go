package robustness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A run whose work is left and does not move ends after stuckAfter,
// saying what it waited for, however long the test may run.
func TestARunThatStopsMovingEndsSayingWhatItWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		err := waitProgress(t.Context(), stuckAfter, func(context.Context) (progress, error) {
			return progress{moved: "jobs by state: completed 153", waits: []string{"batch bid0000000000 (its payload missing) to fail and be deleted by the operator: its state is Deleted"}}, nil
		})
		if err == nil || !strings.Contains(err.Error(), "stuck") || !strings.Contains(err.Error(), "bid0000000000") || !strings.Contains(err.Error(), "Deleted") {
			t.Fatalf("a run that stopped moving ended with %v", err)
		}
		if took := time.Since(start); took < stuckAfter || took > stuckAfter+2*time.Second {
			t.Errorf("it ended after %s; stuck after %s", took, stuckAfter)
		}
	})
}

// Work that moves is waited for, past stuckAfter, until nothing is left.
func TestARunThatMovesIsWaitedForUntilItsWorkIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		reads := 0
		err := waitProgress(t.Context(), stuckAfter, func(context.Context) (progress, error) {
			reads++
			if time.Since(start) > 3*stuckAfter {
				return progress{moved: "done"}, nil
			}
			// One thing moves each minute.
			minute := int(time.Since(start) / time.Minute)
			return progress{moved: fmt.Sprint(minute), waits: []string{"the faults: fault 3 of 9"}}, nil
		})
		if err != nil {
			t.Fatalf("a run that kept moving ended with %v", err)
		}
		if took := time.Since(start); took < 3*stuckAfter {
			t.Errorf("it ended after %s, before its work was done", took)
		}
	})
}

// A wait bounded by its context ends with it, saying what it waited for;
// a failed reading ends it at once with that failure.
func TestARunsWaitEndsWithItsContextOrItsReadingsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		n := 0
		err := waitProgress(ctx, stuckAfter, func(context.Context) (progress, error) {
			n++
			return progress{moved: fmt.Sprint(n), waits: []string{"the traffic: batch 9 of 13"}}, nil
		})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "batch 9 of 13") {
			t.Errorf("a wait past its context ended with %v", err)
		}
		failed := errors.New("the traffic's submission ended early")
		if err := waitProgress(t.Context(), stuckAfter, func(context.Context) (progress, error) {
			return progress{waits: []string{"x"}}, failed
		}); !errors.Is(err, failed) {
			t.Errorf("a failed reading ended the wait with %v", err)
		}
	})
}
