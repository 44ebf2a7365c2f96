// Package batches is the batcher's side of the queue: a batch is created
// from a submission (CreateBatch), found by its submitter's id, claimed
// (BatchClaim) to make its jobs (CreateJobs) and to report it, and followed
// until a batcher needs to act on it (WatchBatches). Operators' actions on
// batches (package admin) go through the same claims.
package batches

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// Client is the batcher's side of the queue over one session. It is safe
// for concurrent use.
type Client struct {
	s   *session.Session
	z   *session.Nodes
	p   queue.Paths
	log *slog.Logger
	r   *jobs.Reader
	j   *jobs.Client // removes the jobs of a batch removed
}

// New returns the batcher's side of the queue over s.
func New(s *session.Session) *Client {
	return &Client{s: s, z: s.Nodes(), p: s.Paths(), log: s.Logger(), r: jobs.NewReader(s), j: jobs.New(s)}
}

// CreateBatch writes a new Pending batch (and its /batch-uuids entry when the
// submission has a batch id) and returns its bid.
func (c *Client) CreateBatch(ctx context.Context, sub *v1.Submission) (string, error) {
	if id := sub.GetBatchId(); id != "" {
		if err := queue.ValidUUID(id); err != nil {
			return "", err
		}
		if bid, err := c.BatchByUUID(ctx, id); err == nil {
			return "", fmt.Errorf("batch id %s was already submitted as %s: %w", id, bid, queue.ErrExists)
		} else if !errors.Is(err, queue.ErrNotFound) {
			return "", err
		}
	}
	if sub.SubmissionDate == nil {
		sub.SubmissionDate = queue.NowStamp()
	}
	created, err := c.z.Create(ctx, c.p.BatchSeq(), nil, zk.FlagSequence)
	if err != nil {
		return "", fmt.Errorf("allocating a batch id: %w", err)
	}
	bid := path.Base(created)
	txn := c.z.Txn().Then(
		session.Create(queue.NodeSubmission, c.p.Batch(bid).Node(queue.NodeSubmission), queue.EncodeSubmission(sub), 0),
		session.Create(queue.NodeStatus, c.p.Batch(bid).Status(), queue.EncodeBatchStatus(&v1.BatchStatus{Status: queue.BatchPending, LastModified: queue.NowStamp()}), 0))
	if id := sub.GetBatchId(); id != "" {
		txn.Then(session.Create(opBatchID, c.p.BatchUUID(id), []byte(bid), 0))
	}
	if err := txn.Commit(ctx); err != nil {
		// Leave nothing behind; fsck removes the empty node if this fails too.
		c.z.Delete(context.WithoutCancel(ctx), created, -1)
		if r, ok := session.RefusedBy(err, opBatchID); ok && r.Exists() {
			return "", fmt.Errorf("batch id %s was already submitted: %w", sub.GetBatchId(), queue.ErrExists)
		}
		return "", fmt.Errorf("writing batch %s: %w", bid, err)
	}
	return bid, nil
}

// opBatchID names the creation of a submitter's batch id, as a refusal
// gives it: there already, the id was submitted before.
const opBatchID = "batch id"

// BatchByUUID returns the bid submitted under a submitter's batch id.
func (c *Client) BatchByUUID(ctx context.Context, uuid string) (string, error) {
	if err := queue.ValidUUID(uuid); err != nil {
		return "", err
	}
	data, _, err := c.z.Get(ctx, c.p.BatchUUID(uuid))
	if errors.Is(err, zk.ErrNoNode) {
		return "", fmt.Errorf("batch id %s: %w", uuid, queue.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("reading batch id %s: %w", uuid, err)
	}
	return string(data), nil
}

// BatchStatus reads a batch's status (queue.ErrNotFound when it has none).
func (c *Client) BatchStatus(ctx context.Context, bid string) (*v1.BatchStatus, error) {
	return session.ReadNode(ctx, c.z, c.p.Batch(bid).Status(), "batch "+bid, queue.DecodeBatchStatus)
}

// GetBatch reads a batch: submission, status, last report, job counts per
// batch folder (from node statistics, not by reading jobs) and lock, all
// in one read.
func (c *Client) GetBatch(ctx context.Context, bid string) (*v1.Batch, error) {
	if !queue.ValidBatchID(bid) {
		return nil, fmt.Errorf("%w: %q is not a batch id (bidNNNNNNNNNN)", queue.ErrInvalid, bid)
	}
	b := &v1.Batch{Id: bid}
	ps := append([]string{c.p.Batch(bid).Status(), c.p.Batch(bid).Node(queue.NodeSubmission), c.p.Batch(bid).Node(queue.NodeStatusReport),
		c.p.Batch(bid).Lock()}, c.p.Batch(bid).RefFolders()...)
	read, err := c.z.Read(ctx, ps)
	if err != nil {
		return nil, err
	}
	if read[0].Stat == nil {
		return nil, fmt.Errorf("batch %s: %w", bid, queue.ErrNotFound)
	}
	if b.Status, err = queue.DecodeBatchStatus(ps[0], read[0].Data); err != nil {
		return nil, err
	}
	if read[1].Stat != nil {
		// A submission with a word ingestq does not know is shown as far
		// as it reads: the batcher fails such a batch, saying why in its
		// status, which must stay readable.
		b.Submission, _ = queue.DecodeSubmission(ps[1], read[1].Data)
	}
	if read[2].Stat != nil {
		if b.StatusReport, err = queue.DecodeStatusReport(ps[2], read[2].Data); err != nil {
			return nil, err
		}
	}
	b.Locked = read[3].Stat != nil
	b.Counts = batchCounts(read[4:])
	return b, nil
}

// BatchCounts counts a batch's job references per folder.
func (c *Client) BatchCounts(ctx context.Context, bid string) (*v1.BatchJobCounts, error) {
	read, err := c.z.Read(ctx, c.p.Batch(bid).RefFolders())
	if err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", bid, err)
	}
	return batchCounts(read), nil
}

// batchCounts are the job references in the folders read (batchFolders'
// order; a missing folder holds none).
func batchCounts(read []session.Node) *v1.BatchJobCounts {
	n := func(i int) int32 {
		if read[i].Stat == nil {
			return 0
		}
		return read[i].Stat.NumChildren
	}
	return &v1.BatchJobCounts{Processing: n(0), Completed: n(1), Failed: n(2), Deleted: n(3)}
}

// ListBatchIDs lists every bid, oldest first.
func (c *Client) ListBatchIDs(ctx context.Context) ([]string, error) {
	names, _, err := c.z.Children(ctx, c.p.Batches())
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	out := names[:0]
	for _, n := range names {
		if queue.ValidBatchID(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}
