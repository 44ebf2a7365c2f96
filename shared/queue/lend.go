package queue

import (
	"context"
	"errors"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue/internal/core"
)

// Backend lends this client's session, paths and node readers to the
// operators' tools (package admin), which read and mend the nodes a stage
// moves. Only packages under shared/queue can name the key. It is built
// once per client: every admin.New shares it.
func (c *Client) Backend(core.Key) *core.Backend {
	c.backendOnce.Do(func() { c.backend = c.newBackend() })
	return c.backend
}

func (c *Client) newBackend() *core.Backend {
	return &core.Backend{
		Get:     c.get,
		GetMany: c.getMany,
		GetManyStat: func(ctx context.Context, paths []string) ([]core.Node, error) {
			read, err := c.getManyStat(ctx, paths)
			out := make([]core.Node, len(read))
			for i, r := range read {
				out[i] = core.Node{Data: r.data, Stat: r.stat}
			}
			return out, err
		},
		Multi:         c.multi,
		FailedOp:      failedOp,
		CreateOp:      c.createOp,
		SetOp:         setOp,
		DeleteOp:      deleteOp,
		CheckOp:       checkOp,
		Children:      c.children,
		Exists:        c.exists,
		CreateGrouped: c.createGrouped,
		EnsureOnce:    c.ensureOnce,
		Delete: func(ctx context.Context, path string, version int32) error {
			_, err := retry(ctx, func() (struct{}, error) { return struct{}{}, c.conn.Delete(path, version) })
			return err
		},
		EachAtMost:        eachAtMost,
		ReadJobs:          c.readForSearch,
		ReadJobsWindow:    searchChunk * searchParallel,
		ListBatchIDs:      c.listBatchIDs,
		BatchStatus:       c.batchStatus,
		DecodeBatchStatus: decodeBatchStatus,
		RemoveBatch:       c.removeBatch,
		DeleteJobTrees:    c.deleteJobTrees,
		DeleteBatchTree:   c.deleteBatchTree,
		EnsureRefFolders: func(ctx context.Context, bid, jid string) error {
			_, err := c.locateRef(ctx, bid, jid)
			return err
		},
		MoveJob: func(ctx context.Context, jid string, want []JobState, decide func(core.Claimed) (core.Move, error)) (*v1.Job, error) {
			return c.moveJob(ctx, jid, want, func(cl *Claim) (Change, error) {
				m, err := decide(core.Claimed{From: cl.from, Job: cl.Job, HasStore: cl.present[nodeStore], HasInventory: cl.present[nodeInventory],
					StatusErr: cl.statusErr})
				return Change{To: m.To, Message: m.Message}, err
			})
		},
		CheckJobMove:    checkJobMove,
		ValidPriority:   validPriority,
		DeleteJob:       c.deleteJob,
		DeleteBatch:     c.deleteBatch,
		ReleaseBatch:    c.releaseBatch,
		UpdateReport:    c.updateReport,
		Ensure:          c.ensure,
		DecodeJobStatus: decodeJobStatus,
		RewriteJobStatus: func(old []byte, next *v1.JobStatus) []byte {
			return withKeysOf(old, encodeJobStatus(next), jobStatusKeys)
		},
		EncodeInt:      encodeInt,
		DecodeInt:      decodeInt,
		Truncate:       truncate,
		NowStamp:       nowStamp,
		RecordChange:   recordChange,
		HasWhatItNeeds: hasWhatItNeeds,
		NeededNodes:    neededNodes,
		Paths: core.Paths{
			Jobs:            c.p.jobs,
			Job:             c.p.job,
			JobNode:         c.p.jobNode,
			JobStatus:       c.p.jobStatus,
			JobLock:         c.p.jobLock,
			JobStateDir:     c.p.jobStateDir,
			JobEntry:        c.p.jobEntry,
			Batch:           c.p.batch,
			BatchStatus:     c.p.batchStatus,
			BatchFolder:     c.p.batchFolder,
			BatchRef:        c.p.batchRef,
			BatchUUIDs:      c.p.batchUUIDs,
			BatchUUID:       c.p.batchUUID,
			FolderOf:        batchFolder,
			ParseEntry:      parseEntry,
			StateSegment:    jobStateSegment,
			IngestPause:     c.p.ingestPause,
			Workers:         c.p.workers,
			Worker:          c.p.worker,
			StorageLocks:    c.p.storageLocks,
			InventoryLocks:  c.p.inventoryLocks,
			Collections:     c.p.collections,
			CollectionHold:  c.p.collectionHold,
			ConsoleSessions: c.p.consoleSessions,
			ConsoleSession:  c.p.consoleSession,
		},
		Names: core.Names{
			NodeStatus: nodeStatus, NodeBid: nodeBid, NodePriority: nodePriority, NodeStore: nodeStore, NodeInventory: nodeInventory,
			FolderDeleted: folderDeleted, FolderProcessing: folderProcessing,
			ForeignLockMessage: foreignLockMessage,
		},
	}
}

// searchNodes are the data nodes a search reads beside the status: what the
// filters look at and the job lists show.
var searchNodes = []string{nodeBid, nodePriority, nodeSpaceNeeded, nodeConfig, nodeIdentifiers}

// Jobs read per multi-read (six nodes each: a multi-read takes at most
// 64 nodes, as each may be as large as a node can be and the answer must
// fit the client's buffer), and multi-reads in flight at once.
const (
	searchChunk    = 10
	searchParallel = 16
)

// readForSearch reads the jobs' status and search nodes; a job gone or
// unreadable is nil.
func (c *Client) readForSearch(ctx context.Context, jids []string) ([]*v1.Job, error) {
	out := make([]*v1.Job, len(jids))
	chunks := (len(jids) + searchChunk - 1) / searchChunk
	errs := make([]error, chunks)
	eachAtMost(chunks, searchParallel, func(k int) {
		part := jids[k*searchChunk : min(len(jids), (k+1)*searchChunk)]
		per := 1 + len(searchNodes)
		paths := make([]string, 0, len(part)*per)
		for _, jid := range part {
			paths = append(paths, c.p.jobStatus(jid))
			for _, n := range searchNodes {
				paths = append(paths, c.p.jobNode(jid, n))
			}
		}
		datas, err := c.getMany(ctx, paths)
		if err != nil {
			errs[k] = err
			return
		}
		for i, jid := range part {
			d := datas[i*per : (i+1)*per]
			if d[0] == nil {
				continue // deleted meanwhile
			}
			st, err := decodeJobStatus(c.p.jobStatus(jid), d[0])
			if err != nil {
				continue
			}
			job := &v1.Job{Id: jid, Status: st}
			if r := c.decodeJobData(job, searchNodes, d[1:], nil); r.corrupt != nil {
				continue
			}
			out[k*searchChunk+i] = job
		}
	})
	return out, errors.Join(errs...)
}
