package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The worker registry: each replica has an entry with what it is doing; a
// dead replica's entry disappears with its session (a heartbeat and its
// harvest, done by the server) and the locks of its jobs go with it.

// workerWriteEvery bounds how often a busy replica rewrites its entry, and
// workerHeartbeat how stale an idle replica's entry may get.
const (
	workerWriteEvery = time.Second
	workerHeartbeat  = 30 * time.Second
)

// WorkerRegistration is this replica's entry in /workers.
type WorkerRegistration struct {
	c      *Client
	path   string
	mu     sync.Mutex
	info   *v1.WorkerInfo
	fill   func(info *v1.WorkerInfo) // brings info up to date (Update)
	dirty  chan struct{}
	stop   context.CancelFunc
	done   chan struct{}
	unsubs func()
}

// NewWorkerID makes the id of one worker of service (a stage runner, the
// recorder's lease manager): service, host and process, then a number of
// this client's own, so that the runners of one process (the processor
// runs two) never share an entry.
func (c *Client) NewWorkerID(service string) string {
	return fmt.Sprintf("%s-%08x-%d", session.ProcessName(service), c.workerNonce, c.workerSeq.Add(1))
}

// registerRetry is how RegisterWorker's first write is tried again while
// ZooKeeper does not answer: doubling from 50 ms to 2 s, until ctx ends.
func registerRetry() retrypolicy.Policy {
	return retrypolicy.Policy{Backoff: 50 * time.Millisecond, Max: 2 * time.Second}
}

// RegisterWorker creates this replica's ephemeral entry and keeps it current:
// written again after Update (at most once a second), refreshed every 30 s,
// and re-created when a new session replaces an expired one. A service
// registers as it starts, maybe while ZooKeeper elects a leader: the first
// write is tried again, with a bounded backoff, until ctx ends.
func (c *Client) RegisterWorker(ctx context.Context, info *v1.WorkerInfo) (*WorkerRegistration, error) {
	if info.GetId() == "" || !queue.ValidWorkerID(info.GetId()) {
		return nil, fmt.Errorf("%w: worker id %q must be letters, digits, '-', '_' or '.'", queue.ErrInvalid, info.GetId())
	}
	info = proto.Clone(info).(*v1.WorkerInfo)
	if info.Started == nil {
		info.Started = timestamppb.Now()
	}
	r := &WorkerRegistration{c: c, path: c.p.Own().Worker(info.GetId()), info: info, dirty: make(chan struct{}, 1), done: make(chan struct{})}
	policy := registerRetry()
	var failures int
	var last error
	again := func(err error) bool {
		if !session.Retryable(err) {
			return false
		}
		c.log.WarnContext(ctx, "registering worker: ZooKeeper does not answer; trying again", "worker", info.GetId(), "error", err.Error(), "in", policy.Wait(failures).String())
		return true
	}
	if _, err := policy.Do(ctx, again, func(attempt int) error {
		failures, last = attempt, r.write(ctx)
		return last
	}); err != nil {
		if last != nil && session.Retryable(last) && ctx.Err() != nil {
			return nil, fmt.Errorf("registering worker %s: %w (last: %w)", info.GetId(), err, last)
		}
		return nil, err
	}
	loopCtx, stop := context.WithCancel(c.s.Life())
	r.stop = stop
	r.unsubs = c.s.OnSession(func(ok bool) {
		if ok {
			r.markDirty()
		}
	})
	go r.loop(loopCtx)
	return r, nil
}

// Update says the entry changed: fill brings it up to date from the
// caller's state when it is next written (at most once a second) or read,
// so a replica may call Update for every job it starts or ends. fill runs
// under the registration's lock and must not call back into it.
func (r *WorkerRegistration) Update(fill func(info *v1.WorkerInfo)) {
	r.mu.Lock()
	r.fill = fill
	r.mu.Unlock()
	r.markDirty()
}

// Info returns a copy of the entry's current content.
func (r *WorkerRegistration) Info() *v1.WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked()
	return proto.Clone(r.info).(*v1.WorkerInfo)
}

func (r *WorkerRegistration) refreshLocked() {
	if r.fill != nil {
		r.fill(r.info)
	}
}

func (r *WorkerRegistration) markDirty() {
	select {
	case r.dirty <- struct{}{}:
	default:
	}
}

func (r *WorkerRegistration) loop(ctx context.Context) {
	defer close(r.done)
	heartbeat := time.NewTicker(workerHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
		case <-r.dirty:
		}
		if err := r.write(ctx); err != nil && ctx.Err() == nil {
			r.c.log.Warn("updating worker registry entry", "worker", r.info.GetId(), "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(workerWriteEvery):
		}
	}
}

// write stores the entry, creating it if the session that held it ended.
func (r *WorkerRegistration) write(ctx context.Context) error {
	r.mu.Lock()
	r.refreshLocked()
	r.info.Heartbeat = timestamppb.Now()
	data, err := protojson.Marshal(r.info)
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encoding worker entry: %w", err)
	}
	_, err = r.c.z.Set(ctx, r.path, data, -1)
	if errors.Is(err, zk.ErrNoNode) {
		_, err = r.c.z.Create(ctx, r.path, data, zk.FlagEphemeral)
		if errors.Is(err, zk.ErrNodeExists) {
			_, err = r.c.z.Set(ctx, r.path, data, -1)
		}
	}
	if err != nil {
		return fmt.Errorf("writing worker entry %s: %w", r.path, err)
	}
	return nil
}

// Close removes the entry.
func (r *WorkerRegistration) Close(ctx context.Context) error {
	r.stop()
	<-r.done
	r.unsubs()
	err := r.c.z.Delete(ctx, r.path, -1)
	if errors.Is(err, zk.ErrNoNode) {
		err = nil
	}
	return err
}
