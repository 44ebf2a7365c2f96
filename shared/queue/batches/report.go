package batches

import (
	"context"
	"fmt"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// CompletedAfterReport returns those of jids whose reference in batch bid's
// states/batch-completed was created after the batch's status-report was
// last written (all that have one, if the batch has no report), in the
// order given; a jid without such a reference is left out. It compares
// ZooKeeper transaction ids (the reference's creation, the report's last
// change), not clocks, so it is exact whoever wrote either. A job's
// reference moves into batch-completed once, when it completes (Completed
// is terminal), so these are the jobs completed since that report.
//
// The batcher needs it for an update report that follows a report whose
// lists were trimmed: the jobs in neither of its lists may have been
// successful then or completed since. It reads one node per jid.
func (c *Client) CompletedAfterReport(ctx context.Context, bid string, jids []string) ([]string, error) {
	ok, st, err := c.z.Exists(ctx, c.p.Batch(bid).Node(queue.NodeStatusReport))
	if err != nil {
		return nil, fmt.Errorf("reading the status-report of batch %s: %w", bid, err)
	}
	after := int64(-1)
	if ok {
		after = st.Mzxid
	}
	keep := make([]bool, len(jids))
	errs := make([]error, len(jids))
	session.EachAtMost(len(jids), 64, func(i int) {
		ok, st, err := c.z.Exists(ctx, c.p.Batch(bid).Ref(queue.FolderCompleted, jids[i]))
		if err != nil {
			errs[i] = fmt.Errorf("reading the reference of job %s in batch %s: %w", jids[i], bid, err)
			return
		}
		keep[i] = ok && st.Czxid > after
	})
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: the others likely say the same
		}
	}
	var out []string
	for i, jid := range jids {
		if keep[i] {
			out = append(out, jid)
		}
	}
	return out, nil
}

// JobsMovedSinceReport reports whether a job of batch bid entered or left
// one of its folders of references after the batch's status-report was
// last written: a job completed, was requeued (and perhaps failed again)
// or was deleted since, so an update report has something to tell. A
// batch without a report has. Like CompletedAfterReport it compares
// ZooKeeper transaction ids (each folder's last change of children, the
// report's last change), in one read of five nodes.
func (c *Client) JobsMovedSinceReport(ctx context.Context, bid string) (bool, error) {
	read, err := c.z.Read(ctx, append([]string{c.p.Batch(bid).Node(queue.NodeStatusReport)}, c.p.Batch(bid).RefFolders()...))
	if err != nil {
		return false, fmt.Errorf("reading the report and job references of batch %s: %w", bid, err)
	}
	if read[0].Stat == nil {
		return true, nil
	}
	for _, folder := range read[1:] {
		if folder.Stat != nil && folder.Stat.Pzxid > read[0].Stat.Mzxid {
			return true, nil
		}
	}
	return false, nil
}
