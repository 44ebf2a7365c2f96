// Package notify is the notifier's stage handler: it calls the collection
// profile's callback with the job's result, removes the job's working
// folder and completes the job. A callback that cannot be delivered
// is tried again for hours (Redelivery), the job waiting in Notify
// meanwhile: the object is stored, and only the news of it is late.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/notifier/internal/callback"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/workdir"
)

// Parts are the job's data nodes read with each claim: the batch (its
// commit moves the job's batch reference) and the configuration.
const Parts = queue.PartConfiguration | queue.PartBid

// CallbackParts are read too when the job's profile has a callback.
const CallbackParts = queue.PartIdentifiers | queue.PartInventory

// Notifier handles jobs in Notify.
type Notifier struct {
	Profiles *profile.Set
	Callback callback.Poster
	// Redelivery is how long, and how often, a callback not delivered is
	// tried again.
	Redelivery Redelivery
	// WorkRoot is the shared working storage; only folders inside it are
	// removed.
	WorkRoot workdir.Root
	Logger   *slog.Logger
	// Metrics, if set, counts each callback's outcome.
	Metrics *telemetry.Metrics
	// Now is the clock the schedule of attempts is read with (nil:
	// time.Now).
	Now func() time.Time
}

// Redelivery is how a callback that could not be delivered (the receiver
// unreachable, or answering 5xx, 408 or 429, through all of a Poster's
// attempts) is tried again. Meanwhile the job waits in Notify, held by no
// notifier (stage.Wait), its status message saying why; when the time is
// up it completes without its callback. The schedule counts from the
// first failure, which the job's history keeps (the first of the stays in
// Notify its history ends with), and from its status's last change: a
// restarted notifier, or another replica, keeps the same one.
type Redelivery struct {
	// For is how long after the first failure the callback is tried again.
	For time.Duration
	// Backoff is the wait before the first retry, doubled after each one
	// up to Max.
	Backoff, Max time.Duration
}

// due is when the attempt that follows one made at last is due, for a
// callback that first failed at since: at since + Backoff, then each
// doubled wait (at most Max) later, and last at since + For.
func (r Redelivery) due(since, last time.Time) time.Time {
	at, wait := since, r.Backoff
	for !at.After(last) && wait < r.Max {
		at = at.Add(wait)
		wait = min(2*wait, r.Max)
	}
	if !at.After(last) && r.Max > 0 {
		// Every wait from here on is Max.
		at = at.Add((last.Sub(at)/r.Max + 1) * r.Max)
	}
	if end := since.Add(r.For); at.After(end) {
		return end
	}
	return at
}

// Handle is the stage handler.
func (n *Notifier) Handle(ctx context.Context, claim stage.Job) stage.Outcome {
	job := claim.Data()
	conf := job.GetConfiguration()
	pr, ok := n.Profiles.Get(conf.GetProfileName())
	if !ok {
		return stage.Failf("profile %q is not among the loaded profiles (%s): whether a callback is due is unknown",
			conf.GetProfileName(), strings.Join(n.Profiles.Names(), ", "))
	}
	var done []string
	if u := pr.CallbackURL; u != "" {
		// Read only for a callback: most profiles have none.
		if err := claim.Load(ctx, CallbackParts); err != nil {
			if errors.Is(err, queue.ErrCorrupt) {
				return stage.Failf("job data unreadable: %v", err)
			}
			n.Logger.WarnContext(ctx, "reading the job's identifiers", "error", err)
			return stage.Release()
		}
		said, wait, ok := n.callBack(ctx, claim, u)
		if !ok {
			return wait
		}
		done = append(done, said)
	}
	if wd, err := claim.WorkingDir(ctx, n.WorkRoot.Dir()); err != nil {
		n.Logger.WarnContext(ctx, "working folder not found", "error", err)
		done = append(done, "working folder not found: "+err.Error())
	} else if wd != "" {
		// The depositor has the result; a folder left behind is only
		// disk space, so it does not fail the job.
		if err := n.WorkRoot.Remove(wd); err != nil {
			n.Logger.ErrorContext(ctx, "working folder left in place", "error", err)
			done = append(done, "working folder left in place: "+err.Error())
		} else {
			done = append(done, "working folder removed")
		}
	}
	return stage.Next(jobs.Change{Message: strings.Join(done, "; ")})
}

// callBack posts the job's result to url when an attempt is due. It says
// what became of the callback for the job's message, with ok; or, without
// ok, the outcome to return instead: a wait for the next attempt, the job
// given back (lost meanwhile) or failed (the receiver refused the call).
func (n *Notifier) callBack(ctx context.Context, claim stage.Job, url string) (said string, other stage.Outcome, ok bool) {
	job, now := claim.Data(), time.Now()
	if n.Now != nil {
		now = n.Now()
	}
	since := pendingSince(job.GetStatus())
	if !since.IsZero() {
		last := since
		if lm := job.GetStatus().GetLastModified(); lm != nil && lm.AsTime().After(last) {
			last = lm.AsTime()
		}
		if due := n.Redelivery.due(since, last); now.Before(due) {
			// Taken before its time (by another replica, a notifier
			// started again, or a moment early, the times read being
			// those of commits): it is given back untouched until then,
			// its status, and so the time of its last attempt, unchanged.
			return "", stage.Wait(due.Sub(now), jobs.Change{}), false
		}
	}
	result := callback.Result{JobID: claim.ID(), BatchID: job.GetBid(), ARK: job.GetIdentifiers().GetPrimaryId(),
		LocalIDs: job.GetIdentifiers().GetLocalId(), Status: "completed",
		Version: int(job.GetInventory().GetVersion()), ManifestURL: job.GetInventory().GetManifestUrl()}
	err := n.Callback.Post(ctx, url, result)
	switch {
	case err == nil:
		n.count(ctx, "delivered")
		// gofail: var notifierCallbackDelivered struct{}
		n.Logger.InfoContext(ctx, "callback delivered", "url", url)
		return "callback " + url + " delivered", stage.Outcome{}, true
	case ctx.Err() != nil:
		return "", stage.Release(), false // the job was lost; another notifier calls back
	case errors.Is(err, callback.ErrRefused):
		n.count(ctx, "refused")
		return "", stage.Fail(err.Error()), false
	}
	if since.IsZero() {
		since = now
	}
	if !now.Before(since.Add(n.Redelivery.For)) {
		n.count(ctx, "failed")
		n.Logger.WarnContext(ctx, "callback not delivered: given up", "url", url, "since", since, "error", err)
		return fmt.Sprintf("%s to %s in %s of attempts (%v)", queue.CallbackNotDelivered, url, n.Redelivery.For, err),
			stage.Outcome{}, true
	}
	n.count(ctx, "pending")
	due := n.Redelivery.due(since, now)
	n.Logger.WarnContext(ctx, "callback pending; tried again later", "url", url, "since", since,
		"next_attempt", due, "error", err)
	// The object is stored: its working folder is not needed while the
	// news of it waits.
	if wd, werr := claim.WorkingDir(ctx, n.WorkRoot.Dir()); werr == nil && wd != "" {
		if rerr := n.WorkRoot.Remove(wd); rerr != nil {
			n.Logger.ErrorContext(ctx, "working folder left in place", "error", rerr)
		}
	}
	// The message stays the same from attempt to attempt while the
	// receiver fails the same way: the job's history gets one entry, not
	// one an attempt.
	msg := fmt.Sprintf("%v; pending: tried again for %s from the first failure", err, n.Redelivery.For)
	return "", stage.Wait(due.Sub(now), jobs.Change{Message: msg}), false
}

// pendingSince is when the job's callback first failed in its present
// stay in Notify: the time of the first of the stays (Notify → Notify)
// its history ends with; zero when it ends with none.
func pendingSince(st *v1.JobStatus) time.Time {
	var since time.Time
	hs := st.GetHistory()
	for i := len(hs) - 1; i >= 0 && hs[i].GetFrom() == queue.Notify && hs[i].GetTo() == queue.Notify; i-- {
		since = hs[i].GetAt().AsTime()
	}
	return since
}

func (n *Notifier) count(ctx context.Context, outcome string) {
	if n.Metrics != nil {
		n.Metrics.Callback(ctx, outcome)
	}
}
