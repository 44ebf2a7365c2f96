package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// JobTotal is how many jobs the queue holds, whatever their state (ended
// ones too, until their batch is cleaned up): the child count of the jobs
// folder, less its states folder, from one small read whatever the queue's
// size. The server's memory grows with it.
func (c *Reader) JobTotal(ctx context.Context) (int, error) {
	ok, st, err := c.z.Exists(ctx, c.p.Jobs())
	switch {
	case err != nil:
		return 0, fmt.Errorf("counting the jobs: %w", err)
	case !ok || st.NumChildren == 0:
		return 0, nil
	}
	return int(st.NumChildren) - 1, nil // the states folder
}

// JobIDsIn returns the ids of the jobs in state (one listing of its folder,
// whatever the number of jobs; nothing else of them is read).
func (c *Reader) JobIDsIn(ctx context.Context, state queue.JobState) (map[string]bool, error) {
	names, _, err := c.z.Children(ctx, c.p.StateDir(state))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("listing %s jobs: %w", queue.JobStateName(state), err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		if e, ok := queue.ParseEntry(n); ok {
			out[e.JID] = true
		}
	}
	return out, nil
}

// JobFilter selects jobs for ListJobs. With neither State nor Batch set,
// every job is listed.
type JobFilter struct {
	State     queue.JobState // 0: any
	Batch     string         // "": any
	PageSize  int            // default 100, at most 1000
	PageToken string         // from the previous page
	// Parts, when set, reads only these parts of each job and its status,
	// and not whether it is locked: what a caller that reads many jobs
	// often (a depositor following a batch) needs, at a fraction of the
	// requests.
	Parts queue.Parts
}

// ListJobs returns one page of jobs and the token of the next page ("" at
// the end). By state, jobs come in queue order (priority, then age); by
// batch or overall, by jid.
func (c *Reader) ListJobs(ctx context.Context, f JobFilter) ([]*v1.Job, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 100
	}
	size = min(size, 1000)
	var keys []string // sort keys, used as page tokens
	var jids []string
	switch {
	case f.Batch != "":
		if !queue.ValidBatchID(f.Batch) {
			return nil, "", fmt.Errorf("%w: %q is not a batch id", queue.ErrInvalid, f.Batch)
		}
		ok, _, err := c.z.Exists(ctx, c.p.Batch(f.Batch).Dir())
		if err != nil {
			return nil, "", err
		}
		if !ok {
			return nil, "", fmt.Errorf("batch %s: %w", f.Batch, queue.ErrNotFound)
		}
		refs, err := c.BatchJobIDs(ctx, f.Batch)
		if err != nil {
			return nil, "", err
		}
		for _, r := range refs {
			jids = append(jids, r...)
		}
		// The folders are read one after another: a job moved between two
		// readings is in both.
		slices.Sort(jids)
		jids = slices.Compact(jids)
		keys = jids
	case f.State != v1.JobState_JOB_STATE_UNSPECIFIED:
		names, _, err := c.z.Children(ctx, c.p.StateDir(f.State))
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, "", fmt.Errorf("listing %s jobs: %w", queue.JobStateName(f.State), err)
		}
		for _, e := range queue.SortedEntries(names) {
			keys = append(keys, fmt.Sprintf("%010d-%s", e.Priority, e.JID))
			jids = append(jids, e.JID)
		}
	default:
		names, _, err := c.z.Children(ctx, c.p.Jobs())
		if err != nil {
			return nil, "", fmt.Errorf("listing jobs: %w", err)
		}
		for _, n := range names {
			if queue.ValidJobID(n) {
				jids = append(jids, n)
			}
		}
		slices.Sort(jids)
		keys = jids
	}
	start := 0
	if f.PageToken != "" {
		start = sort.SearchStrings(keys, f.PageToken)
		if start < len(keys) && keys[start] == f.PageToken {
			start++
		}
	}
	end := min(start+size, len(jids))
	page := jids[start:end]
	jobs := make([]*v1.Job, len(page))
	errs := make([]error, len(page))
	session.EachAtMost(len(page), 32, func(i int) {
		if f.Parts != 0 {
			jobs[i], errs[i] = c.GetJobParts(ctx, page[i], f.Parts)
		} else {
			jobs[i], errs[i] = c.GetJob(ctx, page[i])
		}
	})
	out := jobs[:0]
	for i, j := range jobs {
		switch {
		case errs[i] == nil:
			out = append(out, j)
		case errors.Is(errs[i], queue.ErrNotFound):
			// Deleted while listing.
		case errors.Is(errs[i], queue.ErrCorrupt):
			// Listed with what can be said about it, not hidden.
			out = append(out, &v1.Job{Id: page[i], Status: &v1.JobStatus{Message: errs[i].Error()}})
		default:
			return nil, "", errs[i]
		}
	}
	next := ""
	if end < len(jids) {
		next = keys[end-1]
	}
	return out, next, nil
}

// jobRead is what reading a job's data nodes found.
type jobRead struct {
	present map[string]bool // the nodes that exist
	corrupt error           // the first unreadable node
	// badPriority is why the priority node is unreadable: the job reads
	// as DefaultPriority (its state entry orders it anyway), and the next
	// move through a claim writes it anew.
	badPriority error
	// unusable is why a configuration that reads names a value ingestq
	// cannot use (an unknown payload type, say): operators see the job
	// with the rest of it; a stage's claim fails it with this.
	unusable error
}

// err is why a claim cannot work on the job: an unreadable node, else an
// unusable configuration.
func (r jobRead) err() error {
	if r.corrupt != nil {
		return r.corrupt
	}
	return r.unusable
}

// readJobData fills job from the given data nodes. raw, when not nil, gets
// the data of each node read whose unknown keys a rewrite carries forward.
func (c *Reader) readJobData(ctx context.Context, job *v1.Job, nodes []string, raw map[string][]byte) (jobRead, error) {
	ps := make([]string, len(nodes))
	for i, n := range nodes {
		ps[i] = c.p.Job(job.Id).Node(n)
	}
	datas, err := c.z.ReadData(ctx, ps)
	if err != nil {
		return jobRead{}, err
	}
	return c.decodeJobData(job, nodes, datas, raw), nil
}

// decodeJobData fills job from the data read of its nodes (nil: missing).
// raw, when not nil, gets the data of each node that exists and whose
// unknown keys a rewrite carries forward.
func (c *Reader) decodeJobData(job *v1.Job, nodes []string, datas [][]byte, raw map[string][]byte) jobRead {
	r := jobRead{present: map[string]bool{}}
	note := func(e error) {
		if r.corrupt == nil {
			r.corrupt = e
		}
	}
	for i, n := range nodes {
		d := datas[i]
		if d == nil {
			continue
		}
		r.present[n] = true
		if raw != nil && queue.CarriesKeys(n) {
			raw[n] = d
		}
		p := c.p.Job(job.Id).Node(n)
		switch n {
		case queue.NodeBid:
			job.Bid = string(d)
		case queue.NodePriority:
			// Read leniently: a priority another writer garbled must not
			// make the whole job unreadable (to operators, to the stage
			// that would fail it).
			v, e := queue.DecodeInt(p, d)
			if e != nil || v < 0 || v > math.MaxInt32 {
				v = queue.DefaultPriority
				if e == nil {
					e = &queue.CorruptError{Path: p, Err: fmt.Errorf("priority %s is out of range", d)}
				}
				r.badPriority = e
			}
			job.Priority = int32(v)
		case queue.NodeSpaceNeeded:
			v, e := queue.DecodeInt(p, d)
			note(e)
			job.SpaceNeeded = v
		case queue.NodeConfig:
			v, e := queue.DecodeConfiguration(p, d)
			if e != nil && v != nil {
				r.unusable = e
			} else {
				note(e)
			}
			job.Configuration = v
		case queue.NodeIdentifiers:
			v, e := queue.DecodeIdentifiers(p, d)
			note(e)
			job.Identifiers = v
		case queue.NodeMetadata:
			v, e := queue.DecodeMetadata(p, d)
			note(e)
			job.Metadata = v
		case queue.NodeStore:
			v, e := queue.DecodeStore(p, d)
			note(e)
			job.Store = v
		case queue.NodeInventory:
			v, e := queue.DecodeInventory(p, d)
			note(e)
			job.Inventory = v
		}
		// The manifest is the claim's to decode (keepManifest): a broken
		// file list is for the stage to report, not an unreadable job.
	}
	if slices.Contains(nodes, queue.NodeBid) && job.Bid == "" {
		note(&queue.CorruptError{Path: c.p.Job(job.Id).Node(queue.NodeBid), Err: errors.New("missing")})
	}
	return r
}

// GetJob reads a job and its status (not its manifest).
func (c *Reader) GetJob(ctx context.Context, jid string) (*v1.Job, error) {
	st, err := c.JobStatus(ctx, jid) // checks the id too
	if err != nil {
		return nil, err
	}
	job := &v1.Job{Id: jid, Status: st}
	r, err := c.readJobData(ctx, job, queue.JobDataNodes(), nil)
	if err != nil {
		return nil, err
	}
	if r.corrupt != nil {
		return nil, r.corrupt
	}
	if r.unusable != nil {
		c.log.WarnContext(ctx, "job configuration names a value ingestq cannot use: shown with the rest (a stage fails the job)",
			"job_id", jid, "error", r.unusable.Error())
	}
	if r.badPriority != nil {
		// The state entry orders the job: its priority is the one to show.
		if e, err := c.findEntry(ctx, st.GetStatus(), jid); err == nil {
			job.Priority = e.Priority
		}
		c.log.WarnContext(ctx, "job priority unreadable: read as its state entry's (fsck reports it; the job's next move rewrites it)",
			"job_id", jid, "priority", job.Priority, "error", r.badPriority.Error())
	}
	locked, _, err := c.z.Exists(ctx, c.p.Job(jid).Lock())
	if err != nil {
		return nil, fmt.Errorf("reading job %s lock: %w", jid, err)
	}
	job.Locked = locked
	return job, nil
}

// readStatusAndData reads a job's status and the given data nodes at once
// (one round trip); the status comes first in what it returns.
func (c *Reader) readStatusAndData(ctx context.Context, jid string, nodes []string) ([]session.Node, error) {
	paths := make([]string, 0, len(nodes)+1)
	paths = append(paths, c.p.Job(jid).Status())
	for _, n := range nodes {
		paths = append(paths, c.p.Job(jid).Node(n))
	}
	return c.z.Read(ctx, paths)
}

// GetJobParts reads a job's status and the data nodes of parts, all at
// once (not its lock or manifest): a reader that needs a few fields of many
// jobs, as a batch report does, reads only those.
func (c *Reader) GetJobParts(ctx context.Context, jid string, parts queue.Parts) (*v1.Job, error) {
	if !queue.ValidJobID(jid) {
		return nil, fmt.Errorf("%w: %q is not a job id (jidNNNNNNNNNN)", queue.ErrInvalid, jid)
	}
	nodes := parts.Nodes()
	read, err := c.readStatusAndData(ctx, jid, nodes)
	if err != nil {
		return nil, err
	}
	if read[0].Stat == nil {
		return nil, fmt.Errorf("job %s: %w", jid, queue.ErrNotFound)
	}
	st, err := queue.DecodeJobStatus(c.p.Job(jid).Status(), read[0].Data)
	if err != nil {
		return nil, err
	}
	job := &v1.Job{Id: jid, Status: st}
	if err := c.decodeJobData(job, nodes, session.Datas(read[1:]), nil).err(); err != nil {
		return nil, err
	}
	return job, nil
}

// JobStatus reads only a job's status node.
func (c *Reader) JobStatus(ctx context.Context, jid string) (*v1.JobStatus, error) {
	if !queue.ValidJobID(jid) {
		return nil, fmt.Errorf("%w: %q is not a job id (jidNNNNNNNNNN)", queue.ErrInvalid, jid)
	}
	return session.ReadNode(ctx, c.z, c.p.Job(jid).Status(), "job "+jid, queue.DecodeJobStatus)
}

// GetManifest reads the file list kept beside a job (nil if it has none).
func (c *Reader) GetManifest(ctx context.Context, jid string) (*v1.Manifest, error) {
	p := c.p.Job(jid).Node(queue.NodeManifest)
	data, _, err := c.z.Get(ctx, p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return queue.DecodeManifest(p, data)
}

// scanEntries finds a job's entries by listing every state folder, for a
// job whose status cannot say which folder holds it.
func (c *Reader) scanEntries(ctx context.Context, jid string) (found []queue.Entry, in []queue.JobState, err error) {
	for _, s := range queue.JobStates() {
		names, _, err := c.z.Children(ctx, c.p.StateDir(s))
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, fmt.Errorf("listing %s: %w", queue.JobStateName(s), err)
		}
		for _, n := range names {
			if e, ok := queue.ParseEntry(n); ok && e.JID == jid {
				found, in = append(found, e), append(in, s)
			}
		}
	}
	return found, in, nil
}

// findEntry locates a job's entry in its state folder: by its priority node
// first, by a scan of the folder if a writer left them disagreeing.
func (c *Reader) findEntry(ctx context.Context, s queue.JobState, jid string) (queue.Entry, error) {
	pdata, _, err := c.z.Get(ctx, c.p.Job(jid).Node(queue.NodePriority))
	if err == nil {
		if pr, perr := queue.DecodeInt("", pdata); perr == nil {
			name := queue.EntryName(int32(pr), jid)
			ok, _, err := c.z.Exists(ctx, c.p.StateDir(s)+"/"+name)
			if err != nil {
				return queue.Entry{}, err
			}
			if ok {
				return queue.Entry{Name: name, Priority: int32(pr), JID: jid}, nil
			}
		}
	}
	names, _, err := c.z.Children(ctx, c.p.StateDir(s))
	if err != nil {
		return queue.Entry{}, fmt.Errorf("listing %s: %w", queue.JobStateName(s), err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, "-"+jid) {
			if e, ok := queue.ParseEntry(n); ok {
				return e, nil
			}
		}
	}
	return queue.Entry{}, fmt.Errorf("job %s: %w: status %s but no entry in /jobs/states/%s (run fsck)",
		jid, queue.ErrCorrupt, queue.JobStateName(s), queue.StateSegment(s))
}

// BatchJobIDs lists a batch's job ids per folder of job references
// (BatchRefFolders: "batch-processing", "batch-completed",
// "batch-failed", "batch-deleted"), each sorted.
func (c *Reader) BatchJobIDs(ctx context.Context, bid string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, f := range queue.BatchRefFolders() {
		names, _, err := c.z.Children(ctx, c.p.Batch(bid).Folder(f))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing batch %s %s: %w", bid, f, err)
		}
		slices.Sort(names)
		out[f] = names
	}
	return out, nil
}

// searchNodes are the data nodes ReadJobs reads beside the status: what a
// search's filters look at and the job lists show.
func searchNodes() []string {
	return []string{queue.NodeBid, queue.NodePriority, queue.NodeSpaceNeeded, queue.NodeConfig, queue.NodeIdentifiers}
}

// Jobs read per multi-read (six nodes each: a multi-read takes at most 64
// nodes, as each may be as large as a node can be and the answer must fit
// the client's buffer), and multi-reads in flight at once.
const (
	searchChunk    = 10
	searchParallel = 16
)

// ReadJobsWindow is how many jobs ReadJobs reads with all its multiReads in
// flight together: the window a scan reads at a time.
const ReadJobsWindow = searchChunk * searchParallel

// ReadJobs reads the status and the data nodes a listing shows (bid,
// priority, space needed, configuration, identifiers) of each job, in
// several multiReads at once; a job gone or unreadable is nil.
func (c *Reader) ReadJobs(ctx context.Context, jids []string) ([]*v1.Job, error) {
	nodes := searchNodes()
	out := make([]*v1.Job, len(jids))
	chunks := (len(jids) + searchChunk - 1) / searchChunk
	errs := make([]error, chunks)
	session.EachAtMost(chunks, searchParallel, func(k int) {
		part := jids[k*searchChunk : min(len(jids), (k+1)*searchChunk)]
		per := 1 + len(nodes)
		paths := make([]string, 0, len(part)*per)
		for _, jid := range part {
			paths = append(paths, c.p.Job(jid).Status())
			for _, n := range nodes {
				paths = append(paths, c.p.Job(jid).Node(n))
			}
		}
		datas, err := c.z.ReadData(ctx, paths)
		if err != nil {
			errs[k] = err
			return
		}
		for i, jid := range part {
			d := datas[i*per : (i+1)*per]
			if d[0] == nil {
				continue // deleted meanwhile
			}
			st, err := queue.DecodeJobStatus(c.p.Job(jid).Status(), d[0])
			if err != nil {
				continue
			}
			job := &v1.Job{Id: jid, Status: st}
			if r := c.decodeJobData(job, nodes, d[1:], nil); r.corrupt != nil {
				continue
			}
			out[k*searchChunk+i] = job
		}
	})
	return out, errors.Join(errs...)
}
