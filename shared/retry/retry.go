// Package retry is the one rule by which ingestq tries an operation again:
// how many attempts it gets and how long it waits between them, with the
// settings that give a service's rule its numbers.
package retry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy says how often an operation is tried and how long it waits
// between attempts.
type Policy struct {
	// Attempts is how many times the operation is tried in all; 0 tries
	// until it succeeds, fails for good or its context ends.
	Attempts int
	// Backoff is the wait after the first failure, doubled after each
	// further one; 0 tries again at once.
	Backoff time.Duration
	// Max caps a wait; 0 leaves the doubling uncapped.
	Max time.Duration
	// Jitter is the share of each wait drawn at random, 0 to 1: with 0.5 a
	// wait lies between half the doubled backoff and all of it, so callers
	// that failed together do not come back together.
	Jitter float64
}

// Validate checks the policy's numbers.
func (p Policy) Validate() error {
	switch {
	case p.Attempts < 0:
		return fmt.Errorf("attempts %d must not be negative", p.Attempts)
	case p.Backoff < 0:
		return fmt.Errorf("backoff %v must not be negative", p.Backoff)
	case p.Max < 0 || (p.Max > 0 && p.Max < p.Backoff):
		return fmt.Errorf("maximum backoff %v must be 0 (none) or at least the backoff %v", p.Max, p.Backoff)
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return fmt.Errorf("jitter %v must lie in 0..1", p.Jitter)
	}
	return nil
}

// Wait is the wait after the n-th failed attempt (n from 1).
func (p Policy) Wait(n int) time.Duration {
	d := p.Backoff
	for i := 1; i < n && d > 0; i++ {
		if p.Max > 0 && d >= p.Max {
			break
		}
		if d > time.Duration(1<<62)/2 {
			break // doubled again it would overflow; hours are enough
		}
		d *= 2
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	return Jittered(d, p.Jitter)
}

// Jittered is d less a random part of up to share of it (share 0 to 1), so
// that waits begun together do not end together.
func Jittered(d time.Duration, share float64) time.Duration {
	if share <= 0 || d <= 0 {
		return d
	}
	return d - rand.N(time.Duration(float64(d)*share)+1)
}

// Do calls op, passing the attempt's number from 1, until it returns nil,
// again reports that its error will not pass (again nil: every error may),
// the attempts are spent, or ctx ends. It returns how many attempts were
// made and op's last error, or context.Cause(ctx) when ctx ended between
// attempts. An attempt that failed because ctx ended is judged like any
// other failure: a caller whose answer to that differs checks ctx when Do
// fails.
func (p Policy) Do(ctx context.Context, again func(error) bool, op func(attempt int) error) (int, error) {
	for attempt := 1; ; attempt++ {
		err := op(attempt)
		if err == nil {
			return attempt, nil
		}
		if again != nil && !again(err) || p.Attempts > 0 && attempt >= p.Attempts {
			return attempt, err
		}
		if ctx.Err() != nil {
			return attempt, context.Cause(ctx)
		}
		if err := Sleep(ctx, p.Wait(attempt)); err != nil {
			return attempt, err
		}
	}
}

// Sleep waits d, or until ctx ends, when it returns context.Cause(ctx).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
