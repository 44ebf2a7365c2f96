package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/s3test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DepositOptions configure the run of one deposit through the pipeline.
type DepositOptions struct {
	Dir    string // run directory
	BinDir string // built service binaries
	// Deposits is the folder the depositor serves; Payload the path of the
	// payload in it, of PayloadType.
	Deposits    string
	Payload     string
	PayloadType v1.PayloadType
	// S3 stores into a bucket of an S3-compatible server the run starts
	// (versitygw), not into a folder.
	S3 bool
	// Env is added to every service's environment.
	Env map[string]string
	// Profiles, if set, is where a CPU profile of every service, taken
	// while the deposit goes through, is written (<service>.pprof), and
	// at its end a heap profile (<service>.heap).
	Profiles string
}

// ObjectOptions configure the run of one object of many files.
type ObjectOptions struct {
	Dir    string // run directory
	BinDir string // built service binaries
	// Files of FileBytes each make the object, listed in one object
	// manifest with their sizes and SHA-256 digests.
	Files, FileBytes int
	S3               bool
	Env              map[string]string
	Profiles         string
}

// Result is what the run of one deposit measured. The stack is left
// running for the caller to look at what it stored (Stop ends it).
type Result struct {
	Elapsed  time.Duration // from the submission to the job Completed
	BatchID  string
	JobID    string
	Deposits string // the folder the depositor served
	// PeakRSSMB is each service's peak resident memory (VmHWM), in MB.
	PeakRSSMB map[string]float64
	// NodeBytes is the largest size seen of each node of the job and its
	// batch while it went through, by the node's path under the job or
	// batch ("job/status", "batch/status-report").
	NodeBytes map[string]int
	// Steps is the time the job spent in each state, from its history.
	Steps []Step
	Stack *stack.Stack
	S3    *s3test.Server // nil unless ObjectOptions.S3
	stop  []func()
	once  sync.Once
}

// Step is the time a job spent in one state.
type Step struct {
	State string
	Took  time.Duration
}

// Stop stops the services, the depositor and the S3 server; again, it does
// nothing.
func (r *Result) Stop(ctx context.Context) {
	r.once.Do(func() {
		if r.Stack != nil {
			r.Stack.Stop(ctx)
		}
		for _, f := range slices.Backward(r.stop) {
			f()
		}
	})
}

// ObjectFile is file i of an object ObjectDeposit writes: its name in the
// object and its bytes.
func ObjectFile(i, size int) (string, []byte) {
	body := []byte(strings.Repeat(fmt.Sprintf("file %06d ", i), size/12+1)[:size])
	return fmt.Sprintf("d%03d/f%06d.txt", i/1000, i), body
}

// ObjectDeposit writes an object of n files of size bytes under dir/files/
// and its object manifest, dir/object.checkm, which lists each with its
// size and SHA-256.
func ObjectDeposit(dir string, n, size int) error {
	var m strings.Builder
	m.WriteString("#%checkm_0.7\n#%profile | http://uc3.cdlib.org/ontology/mrt/ingest/manifest/mrt-ingest-manifest\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n")
	for i := range n {
		name, body := ObjectFile(i, size)
		p := filepath.Join(dir, "files", filepath.FromSlash(name))
		if i%1000 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		fmt.Fprintf(&m, "{{base}}/files/%s | sha256 | %s | %d | | %s\n", name, hex.EncodeToString(sum[:]), size, name)
	}
	m.WriteString("#%eof\n")
	return os.WriteFile(filepath.Join(dir, "object.checkm"), []byte(m.String()), 0o644)
}

// Object writes an object of o.Files files (ObjectDeposit) and sends its
// object manifest through the pipeline (Deposit).
func Object(ctx context.Context, o ObjectOptions) (*Result, error) {
	deposits := filepath.Join(o.Dir, "deposits")
	if err := ObjectDeposit(deposits, o.Files, o.FileBytes); err != nil {
		return nil, err
	}
	return Deposit(ctx, DepositOptions{Dir: o.Dir, BinDir: o.BinDir, Deposits: deposits, Payload: "object.checkm",
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, S3: o.S3, Env: o.Env, Profiles: o.Profiles})
}

// Deposit runs the seven services as processes (with a ZooKeeper of their
// own), submits one payload served from loopback and waits for its one job
// to complete, watching the sizes of its ZooKeeper nodes meanwhile.
func Deposit(ctx context.Context, o DepositOptions) (*Result, error) {
	res := &Result{Deposits: o.Deposits, PeakRSSMB: map[string]float64{}, NodeBytes: map[string]int{}}
	dep, err := depositor.Start(res.Deposits)
	if err != nil {
		return nil, err
	}
	res.stop = append(res.stop, func() { dep.Close() })
	profiles := filepath.Join(o.Dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		res.Stop(ctx)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(profiles, "bench.yaml"),
		[]byte("name: bench\ncollection: bench\nnotification_addresses: [bench@example.org]\n"), 0o644); err != nil {
		res.Stop(ctx)
		return nil, err
	}
	env := map[string]string{"INGESTQ_LOG_LEVEL": "warn", "INGESTQ_PPROF": strconv.FormatBool(o.Profiles != "")}
	if o.S3 {
		srv, stop, err := startS3(ctx, o.Dir, env)
		if err != nil {
			res.Stop(ctx)
			return nil, err
		}
		res.S3 = srv
		res.stop = append(res.stop, stop)
	}
	maps.Copy(env, o.Env)
	if res.Stack, err = stack.Start(ctx, stack.Options{Dir: o.Dir, BinDir: o.BinDir, ProfilesDir: profiles, Env: env}); err != nil {
		res.Stop(ctx)
		return nil, err
	}
	conn, err := grpc.NewClient(res.Stack.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	batches := v1.NewBatchServiceClient(conn)
	c, err := Connect(ctx, res.Stack.Servers, res.Stack.Root)
	if err != nil {
		return res, err
	}
	defer c.Close()

	start := time.Now()
	sub, err := batches.Submit(ctx, &v1.SubmitRequest{Submitter: "bench", Profile: "bench",
		PayloadUrl: dep.URL + "/" + o.Payload, PayloadType: o.PayloadType})
	if err != nil {
		return res, fmt.Errorf("submitting %s: %w", o.Payload, err)
	}
	res.BatchID = sub.GetBatchId()
	profiled := make(chan error, 1)
	if o.Profiles != "" {
		go func() { profiled <- profileServices(ctx, res.Stack, o.Profiles) }()
	} else {
		profiled <- nil
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- res.watchNodes(watchCtx, c.Nodes(), c.Paths()) }()
	err = waitCompleted(ctx, batches, res.BatchID, 1, res.Stack.LogDir)
	res.Elapsed = time.Since(start)
	stopWatching()
	if werr := <-watched; err == nil && werr != nil && !errors.Is(werr, context.Canceled) {
		err = werr
	}
	if perr := <-profiled; err == nil {
		err = perr
	}
	if err != nil {
		return res, err
	}
	if o.Profiles != "" {
		// Every allocation since the start (alloc_space) and what is held
		// now: where the object's memory went.
		for _, service := range stack.Services {
			if err := fetch(ctx, "http://"+res.Stack.Procs(service)[0].Metrics+"/debug/pprof/heap",
				filepath.Join(o.Profiles, service+".heap")); err != nil {
				return res, err
			}
		}
	}
	if res.JobID == "" {
		if res.JobID, err = completedJob(ctx, c, res.BatchID); err != nil {
			return res, err
		}
	}
	for _, service := range stack.Services {
		for _, p := range res.Stack.Procs(service) {
			mb, err := ResidentMB(p.PID())
			if err != nil {
				return res, err
			}
			res.PeakRSSMB[service] = max(res.PeakRSSMB[service], mb)
		}
	}
	return res, res.readSteps(ctx, c.Nodes(), c.Paths())
}

// WaitBatchJob waits until the one job of batch bid is Completed, or fails
// as soon as it fails (its message and logs named), and returns its id.
func WaitBatchJob(ctx context.Context, batches v1.BatchServiceClient, c *session.Session, bid, logs string) (string, error) {
	if err := waitCompleted(ctx, batches, bid, 1, logs); err != nil {
		return "", err
	}
	return completedJob(ctx, c, bid)
}

// completedJob is the one job of a batch whose jobs all completed.
func completedJob(ctx context.Context, c *session.Session, bid string) (string, error) {
	names, _, err := c.Nodes().Children(ctx, c.Paths().Batch(bid).Folder(queue.FolderCompleted))
	if err != nil || len(names) != 1 {
		return "", fmt.Errorf("the job of batch %s: %v, %v", bid, names, err)
	}
	return names[0], nil
}

// watchNodes reads the sizes of every node of the job and its batch twice
// a second, keeping the largest of each, until ctx ends.
func (r *Result) watchNodes(ctx context.Context, z *session.Nodes, p queue.Paths) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if r.JobID == "" {
			names, _, err := z.Children(ctx, p.Batch(r.BatchID).Folder(queue.FolderProcessing))
			if err == nil && len(names) > 0 {
				r.JobID = names[0]
			}
		}
		if err := r.nodeSizes(ctx, z, p.Batch(r.BatchID).Dir(), "batch"); err != nil {
			return err
		}
		if r.JobID != "" {
			if err := r.nodeSizes(ctx, z, p.Job(r.JobID).Dir(), "job"); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// nodeSizes records the size of each node under dir, by its path below it.
func (r *Result) nodeSizes(ctx context.Context, z *session.Nodes, dir, prefix string) error {
	var walk func(string, string) error
	walk = func(node, name string) error {
		_, st, err := z.Get(ctx, node)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		r.NodeBytes[name] = max(r.NodeBytes[name], int(st.DataLength))
		if st.NumChildren == 0 {
			return nil
		}
		kids, _, err := z.Children(ctx, node)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := walk(path.Join(node, k), name+"/"+k); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(dir, prefix)
}

// readSteps reads the time the job spent in each state from its history.
func (r *Result) readSteps(ctx context.Context, z *session.Nodes, p queue.Paths) error {
	data, _, err := z.Get(ctx, p.Job(r.JobID).Status())
	if err != nil {
		return fmt.Errorf("reading the job's status: %w", err)
	}
	st, err := queue.DecodeJobStatus(p.Job(r.JobID).Status(), data)
	if err != nil {
		return err
	}
	for _, h := range st.GetHistory() {
		if h.GetFrom() != v1.JobState_JOB_STATE_UNSPECIFIED {
			r.Steps = append(r.Steps, Step{State: queue.JobStateName(h.GetFrom()), Took: h.GetInState().AsDuration()})
		}
	}
	return nil
}
