package report

import (
	"fmt"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/internal/mail"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
)

// Mail is the report as a message to the profile's notification addresses.
func (r *Report) Mail(sub *v1.Submission, prof *profile.Profile) mail.Message {
	var b strings.Builder
	kind := "Report"
	if r.Update {
		kind = "Update report"
	}
	fmt.Fprintf(&b, "%s on ingestq batch %s\n\n", kind, r.Bid)
	writeBatch(&b, r.Bid, sub, prof)
	outcome := r.Summary()
	if r.Jobless() && !strings.HasPrefix(outcome, "failed") {
		outcome = "failed: " + outcome
	}
	fmt.Fprintf(&b, "Result:      %s\n", outcome)
	if todo := r.whatToDo(sub); todo != "" {
		fmt.Fprintf(&b, "What to do:  %s\n", todo)
	}
	if r.Deleted > 0 {
		fmt.Fprintf(&b, "Deleted:     %d job(s) deleted by an operator are not listed\n", r.Deleted)
	}
	if n := r.Completed.newVersions(); n > 0 {
		fmt.Fprintf(&b, "Versions:    %d completed object(s) had been stored before: each got a new version, whose number is listed below\n", n)
	}
	completedTitle := "Completed"
	if r.Update {
		completedTitle = "Completed since the last report"
	}
	writeSection(&b, completedTitle, r.Completed, false)
	writeSection(&b, "Failed", r.Failed, true)
	writeSection(&b, "Still in progress", r.InProgress, false)
	subject := fmt.Sprintf("ingestq batch %s: %s", r.Bid, outcome)
	if r.Update {
		subject = fmt.Sprintf("ingestq batch %s (update): %s", r.Bid, outcome)
	}
	return mail.Message{Key: r.Key, To: prof.NotificationAddresses, Subject: subject, Body: b.String()}
}

// Summary says in one line how the batch ended; it becomes the batch's
// status message and the mail's subject. A batch that never had a job
// says why: the reason its payload could not be used.
func (r *Report) Summary() string {
	switch {
	case r.SpawnStopped != "" && r.Jobless():
		return r.SpawnStopped
	case r.SpawnStopped != "":
		return fmt.Sprintf("failed: not every row of the payload became a job: %s; of its jobs: %s", r.SpawnStopped, r.jobsSummary())
	case r.Jobless():
		return "failed: the batch has no job"
	}
	return r.jobsSummary()
}

// whatToDo says what the depositor can do about a batch that failed for
// its payload ("" for any other).
func (r *Report) whatToDo(sub *v1.Submission) string {
	switch {
	case r.SpawnStopped != "" && r.Jobless():
		return fmt.Sprintf("correct the payload (%s) as the result says, and submit it again as a new batch", sub.GetPayloadUrl())
	case r.SpawnStopped != "":
		return "the jobs listed below went on; submit the payload's other rows again as a new batch"
	}
	return ""
}

// jobsSummary says how the batch's jobs ended. It says completed only when
// every job that was not deleted completed, and one did at least; and how
// many of the completed ones had their callback given up.
func (r *Report) jobsSummary() string {
	s := r.outcomes()
	if n := r.callbacksNotDelivered(); n > 0 && r.anyCompleted() {
		s += fmt.Sprintf("; %d callback(s) not delivered", n)
	}
	return s
}

// callbacksNotDelivered counts the completed jobs listed whose callback
// the notifier gave up (queue.CallbackNotDelivered).
func (r *Report) callbacksNotDelivered() int {
	n := 0
	for _, l := range r.Completed.Lines {
		if strings.HasPrefix(l.Message, queue.CallbackNotDelivered) {
			n++
		}
	}
	return n
}

// outcomes says how the batch's jobs ended.
func (r *Report) outcomes() string {
	switch {
	case !r.anyCompleted() && r.Failed.Total == 0 && r.InProgress.Total == 0:
		return "failed: no object completed"
	case r.Update && r.Failed.Total == 0 && r.InProgress.Total == 0:
		return fmt.Sprintf("completed: %d more object(s) completed, none failed", r.Completed.Total)
	case r.Update:
		return fmt.Sprintf("failed: %d more object(s) completed, %d still failed, %d in progress",
			r.Completed.Total, r.Failed.Total, r.InProgress.Total)
	case r.Failed.Total == 0:
		return fmt.Sprintf("completed: all %d object(s) completed", r.Completed.Total)
	default:
		return fmt.Sprintf("failed: %d of %d object(s) failed", r.Failed.Total, r.Failed.Total+r.Completed.Total)
	}
}

func writeBatch(b *strings.Builder, bid string, sub *v1.Submission, prof *profile.Profile) {
	fmt.Fprintf(b, "Batch:       %s", bid)
	if id := sub.GetBatchId(); id != "" {
		fmt.Fprintf(b, " (batch uuid %s)", id)
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "Profile:     %s (collection %s)\n", sub.GetProfileName(), prof.Collection)
	fmt.Fprintf(b, "Submitter:   %s\n", sub.GetSubmitter())
	fmt.Fprintf(b, "Payload:     %s (%s)\n", sub.GetPayloadUrl(), queue.PayloadTypeName(sub.GetType()))
	if t := sub.GetSubmissionDate(); t != nil {
		fmt.Fprintf(b, "Submitted:   %s\n", t.AsTime().UTC().Format(queue.TimeLayout))
	}
}

func writeSection(b *strings.Builder, title string, s Section, messages bool) {
	if s.Total == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s (%d):\n", title, s.Total)
	for _, l := range s.Lines {
		ark := l.ARK
		if ark == "" {
			ark = "(no ARK)"
		}
		fmt.Fprintf(b, "  %s  %s", l.JobID, ark)
		if l.Version > 0 {
			fmt.Fprintf(b, "  version %d", l.Version)
		}
		if len(l.LocalIDs) > 0 {
			fmt.Fprintf(b, "  local id %s", strings.Join(l.LocalIDs, ", "))
		}
		if l.PayloadURL != "" {
			fmt.Fprintf(b, "  %s", l.PayloadURL)
		}
		b.WriteString("\n")
		switch {
		case strings.HasPrefix(l.Message, queue.CallbackNotDelivered):
			// A completed job: its object is stored, the news of it did
			// not reach the collection's receiver.
			fmt.Fprintf(b, "      %s\n", oneLine(strings.Split(l.Message, "; ")[0]))
		case messages && l.FailedIn != "":
			fmt.Fprintf(b, "      failed in %s: %s\n", l.FailedIn, oneLine(l.Message))
		case messages && l.Message != "":
			fmt.Fprintf(b, "      %s\n", oneLine(l.Message))
		}
	}
	if more := s.Total - len(s.Lines); more > 0 {
		// The status-report node lists them too unless the batch is past
		// what a node holds; the batch's job list always does.
		fmt.Fprintf(b, "  … and %d more (not listed here; ingestq's job list of the batch has every one)\n", more)
	}
}

// newVersions counts the listed jobs that stored a version after the
// first of their object.
func (s Section) newVersions() int {
	n := 0
	for _, l := range s.Lines {
		if l.Version > 1 {
			n++
		}
	}
	return n
}

// oneLine keeps a stored message from breaking the report's layout.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Queued is the "batch queued" notice sent once a batch's jobs exist.
func Queued(bid string, sub *v1.Submission, prof *profile.Profile, jobs int) mail.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "ingestq queued batch %s: %d object(s) will be ingested.\n\n", bid, jobs)
	writeBatch(&b, bid, sub, prof)
	b.WriteString("\nA report follows when every object has been ingested or has failed.\n")
	return mail.Message{
		Key:     bid + "-queued",
		To:      prof.NotificationAddresses,
		Subject: fmt.Sprintf("ingestq batch %s queued: %d object(s)", bid, jobs),
		Body:    b.String(),
	}
}
