// Package notify is the notifier's stage handler: it calls the collection
// profile's callback with the job's result, removes the job's working
// folder and completes the job.
package notify

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/ingestq/ingestq/services/notifier/internal/callback"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
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
	// WorkRoot is the shared working storage; only folders inside it are
	// removed.
	WorkRoot workdir.Root
	Logger   *slog.Logger
}

// Handle is the stage handler.
func (n *Notifier) Handle(ctx context.Context, claim stage.Claim) stage.Outcome {
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
		result := callback.Result{JobID: claim.ID(), BatchID: job.GetBid(), ARK: job.GetIdentifiers().GetPrimaryId(),
			LocalIDs: job.GetIdentifiers().GetLocalId(), Status: "completed",
			Version: int(job.GetInventory().GetVersion()), ManifestURL: job.GetInventory().GetManifestUrl()}
		if err := n.Callback.Post(ctx, u, result); err != nil {
			if ctx.Err() != nil {
				return stage.Release() // the job was lost; another notifier calls back
			}
			return stage.Fail(err.Error())
		}
		// gofail: var notifierCallbackDelivered struct{}
		n.Logger.InfoContext(ctx, "callback delivered", "url", u)
		done = append(done, "callback "+u+" delivered")
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
