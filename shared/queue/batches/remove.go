package batches

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// Names of a batch removal's operations, as a refusal gives them.
const (
	opRef   = "batch reference"
	opBatch = "batch node"
)

// deleteChunk is how many deletions go into one multi when removing trees.
const deleteChunk = 500

// RemoveBatchTree removes a batch's own nodes, its job references and its
// submitter's id (uuid; "": none) pointing at it; its jobs must be gone
// already (jobs.Client.RemoveJobs). A crash half-way leaves a batch that a
// later removal, the cleanup or fsck finishes. A batch claimed is removed
// by its claim (BatchClaim.Remove), fenced.
func (c *Client) RemoveBatchTree(ctx context.Context, bid string, uuid string) error {
	ops, err := c.treeOps(ctx, bid, uuid, true)
	if err != nil || ops == nil {
		return err
	}
	if err := c.z.Txn().Then(ops...).Commit(ctx); err != nil {
		return fmt.Errorf("deleting batch %s: %w", bid, err)
	}
	return nil
}

// treeOps deletes a batch's job references, in multis of deleteChunk, and
// returns the deletions of the rest of its tree (its lock's only if
// withLock), its lock and status, then its folder, last: until they go the
// batch is visibly Deleted (or Completed), and a crash leaves something
// that cleanup or fsck finishes. No operation: the batch is gone.
func (c *Client) treeOps(ctx context.Context, bid string, uuid string, withLock bool) (ops []session.Op, err error) {
	refs, err := c.r.BatchJobIDs(ctx, bid)
	if err != nil {
		return nil, err
	}
	for _, f := range queue.BatchRefFolders() {
		for _, jid := range refs[f] {
			ops = append(ops, session.Delete(opRef, c.p.Batch(bid).Ref(f, jid), -1))
			if len(ops) >= deleteChunk {
				if err := c.z.Txn().Then(ops...).Commit(ctx); err != nil {
					return nil, fmt.Errorf("deleting batch %s references: %w", bid, err)
				}
				ops = ops[:0]
			}
		}
	}
	children, _, err := c.z.Children(ctx, c.p.Batch(bid).Dir())
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, n := range children {
		if n == queue.NodeStates {
			for _, f := range queue.BatchRefFolders() {
				if ok, _, _ := c.z.Exists(ctx, c.p.Batch(bid).Folder(f)); ok {
					ops = append(ops, session.Delete(opFolder, c.p.Batch(bid).Folder(f), -1))
				}
			}
		}
		if n != queue.NodeStatus && n != queue.NodeLock {
			ops = append(ops, session.Delete(n, c.p.Batch(bid).Node(n), -1))
		}
	}
	if uuid != "" {
		if data, _, err := c.z.Get(ctx, c.p.BatchUUID(uuid)); err == nil && string(data) == bid {
			ops = append(ops, session.Delete(opBatchID, c.p.BatchUUID(uuid), -1))
		}
	}
	for _, n := range []string{queue.NodeLock, queue.NodeStatus} {
		if slices.Contains(children, n) && (withLock || n != queue.NodeLock) {
			ops = append(ops, session.Delete(n, c.p.Batch(bid).Node(n), -1))
		}
	}
	ops = append(ops, session.Delete(opBatch, c.p.Batch(bid).Dir(), -1))
	return ops, nil
}
