// Package process holds the processor's two stage handlers. Processing
// gives a downloaded job its ARK (reusing the one its local id is bound to,
// or minting one), writes the object's system files, lists and checks every
// file and writes the storage manifest; the job goes on to Storing, its
// store node naming that manifest. Storing stores the version under the
// object's storage lock and hands the job to Recording (storing.go).
package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/filelist"
	"github.com/ingestq/ingestq/services/processor/internal/mint"
	"github.com/ingestq/ingestq/services/processor/internal/serving"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/services/processor/internal/sysfiles"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
	"google.golang.org/protobuf/proto"
)

// StorageManifest is the storage manifest's name in the working folder
// (beside producer/ and system/, which it lists).
const StorageManifest = "storage-manifest.checkm"

// Queue is what the handlers use of the queue beside the job's claim: the
// bindings of local ids to ARKs, and the object locks a job's commit
// releases (jobs.Change.Unlock). *jobs.Client is one; being an
// interface, the handlers' decisions are tested without ZooKeeper.
type Queue interface {
	LookupLocalID(ctx context.Context, owner, localID string) (string, error)
	BindLocalID(ctx context.Context, owner, localID, ark string) (string, error)
	LockLocalID(ctx context.Context, localID, owner string) (*jobs.ObjectLock, error)
	LockStorage(ctx context.Context, ark string) (*jobs.ObjectLock, error)
}

var _ Queue = (*jobs.Client)(nil)

// Merritt is a node of Merritt's storage service that versions go to.
// Processing prepares each version for it: the files it fetches served by
// Serving, the store node as Merritt's storage consumer reads it, the
// inventory node naming the object's manifest on the node, as Merritt's
// inventory service reads it. Storing, when it is ingestq's own, makes the
// call (store.Merritt).
type Merritt struct {
	Storage *merrittstore.Client
	Serving *serving.Server
}

// Processor handles jobs in Processing and in Storing.
type Processor struct {
	Queue    Queue
	Minter   mint.Minter
	Storage  store.Storage
	Merritt  *Merritt     // nil: versions go to Storage alone
	Profiles *profile.Set // binds local ids per profile owner; nil: per collection
	// WorkRoot is the shared working storage: a job's working folder must
	// lie inside it.
	WorkRoot string
	// LockRetry is how long a job waits when its object is being stored by
	// another job (default 3 s).
	LockRetry time.Duration
	// StoreRetry is how the storing step tries a version again after a
	// failure that may pass (its zero value: it does not).
	StoreRetry StoreRetry
	Logger     *slog.Logger

	storing  bool     // this process stores the versions it processes (StageConfigs)
	digested handOver // what processing saw of the files, for storing after it
}

// handOver hands what the processing step saw of a job's files (as it
// digested them) to the storing step that follows it in this process on
// the same claim, a job the runner chains on with its lock kept: the
// store links those files without reading them again (store.Seen). A job
// stored by another claim or process is read again, whatever happened to
// its working folder in between.
type handOver struct {
	mu   sync.Mutex
	jobs map[stage.Job]digestedFiles
}

type digestedFiles struct {
	manifest string // the storage manifest's URL
	seen     map[string]store.Seen
	at       time.Time
}

// handOverFor is how long a hand-over waits for its storing step: a
// chained one comes at once; one that never comes (the job went on alone,
// to another replica) is dropped.
const handOverFor = 10 * time.Minute

func (h *handOver) put(claim stage.Job, manifest string, seen map[string]store.Seen) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.jobs == nil {
		h.jobs = map[stage.Job]digestedFiles{}
	}
	for c, d := range h.jobs {
		if time.Since(d.at) > handOverFor {
			delete(h.jobs, c)
		}
	}
	h.jobs[claim] = digestedFiles{manifest: manifest, seen: seen, at: time.Now()}
}

// take returns (and forgets) what processing on this claim saw of the files
// of the storage manifest at manifest; nil if it was another claim's.
func (h *handOver) take(claim stage.Job, manifest string) map[string]store.Seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.jobs[claim]
	delete(h.jobs, claim)
	if !ok || d.manifest != manifest {
		return nil
	}
	return d.seen
}

// StageConfigs are the processor's stages: processing, and storing unless
// another consumer (Merritt's storage service) owns Storing; then processed
// jobs wait in Storing for it.
func (p *Processor) StageConfigs(storing bool) []stage.Config {
	p.storing = storing
	cfgs := []stage.Config{{
		Name:    "processing",
		From:    queue.Processing,
		To:      queue.Storing,
		Parts:   queue.PartConfiguration | queue.PartIdentifiers | queue.PartMetadata | queue.PartManifest,
		Handler: p.Handle,
	}}
	if storing {
		cfgs = append(cfgs, stage.Config{
			Name:    "storing",
			From:    queue.Storing,
			To:      queue.Recording,
			Parts:   queue.PartConfiguration | queue.PartIdentifiers | queue.PartStore,
			Handler: p.HandleStoring,
		})
	}
	return cfgs
}

// Handle is the processing stage's handler.
func (p *Processor) Handle(ctx context.Context, claim stage.Job) stage.Outcome {
	out, locks, err := p.process(ctx, claim)
	return p.outcome(ctx, "processing", out, err, locks)
}

// outcome is a step's outcome once its error, if any, is sorted: a lost
// job is released, a failure fails the job, anything else is tried again.
// The object locks the step holds (unlock) go with the outcome's commit,
// or after it if it does not happen; a released job's at once.
func (p *Processor) outcome(ctx context.Context, step string, out stage.Outcome, err error, unlock []*jobs.ObjectLock) stage.Outcome {
	if err == nil {
		return out
	}
	var fail *failure
	switch {
	case ctx.Err() != nil || errors.Is(err, queue.ErrFenced):
		p.unlock(ctx, unlock)
		return stage.Release() // the job was lost; nothing may be committed
	case errors.As(err, &fail):
		return stage.To(queue.Failed, jobs.Change{Message: fail.msg, Unlock: unlock})
	default:
		// The queue itself is in trouble (a read failed): try again later.
		p.logger().WarnContext(ctx, step+" interrupted; will retry", "error", err)
		return stage.Wait(p.lockRetry(), jobs.Change{Unlock: unlock})
	}
}

// unlock releases object locks the job's commit does not. A nil lock is
// none, as in a commit's Unlock (a Queue that keeps its locks in memory
// gives nil).
func (p *Processor) unlock(ctx context.Context, locks []*jobs.ObjectLock) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, l := range locks {
		if l == nil {
			continue
		}
		if err := l.Unlock(uctx); err != nil {
			p.logger().WarnContext(ctx, "releasing an object lock", "error", err)
		}
	}
}

// failure is an error that fails the job; its message says what failed.
type failure struct{ msg string }

func (f *failure) Error() string { return f.msg }

func failf(format string, args ...any) error { return &failure{msg: fmt.Sprintf(format, args...)} }

// process is the processing step. It returns its outcome, or its error,
// with the local id locks it holds (lockLocalIDs) for the outcome's commit
// to release: none when it stopped before its ARK was settled.
func (p *Processor) process(ctx context.Context, claim stage.Job) (stage.Outcome, []*jobs.ObjectLock, error) {
	dir, err := claim.WorkingDir(ctx, p.WorkRoot)
	if err != nil {
		if errors.Is(err, queue.ErrCorrupt) {
			return stage.Outcome{}, nil, failf("working folder: %v", err)
		}
		return stage.Outcome{}, nil, fmt.Errorf("finding the working folder: %w", err)
	}
	wd, err := p.workingDir(dir)
	if err != nil {
		return stage.Outcome{}, nil, failf("working folder: %v", err)
	}
	declared, err := p.fileList(ctx, claim, dir)
	if errors.Is(err, queue.ErrCorrupt) {
		return stage.Outcome{}, nil, failf("the job's file list: %v", err)
	}
	if err != nil {
		return stage.Outcome{}, nil, fmt.Errorf("reading the job's manifest: %w", err)
	}
	owner := p.owner(claim.Data().GetConfiguration())
	held, err := p.lockLocalIDs(ctx, claim.Data().GetIdentifiers().GetLocalId(), owner)
	if errors.Is(err, queue.ErrLocked) {
		p.logger().InfoContext(ctx, "a local id of the job is locked elsewhere (looked up, minted, or its job in Processing); waiting", "error", err)
		return stage.Wait(p.lockRetry(), jobs.Change{}), nil, nil
	}
	if err != nil {
		return stage.Outcome{}, nil, err
	}
	// Until the outcome carries the locks (its commit releases them), they
	// are this step's to release: after an error, and after a panic, which
	// the runner turns into a failure that knows nothing of them.
	carried := false
	defer func() {
		if !carried {
			p.unlock(ctx, held)
		}
	}()
	ark, err := p.identify(ctx, claim, owner)
	if err != nil {
		return stage.Outcome{}, nil, err
	}
	out, err := p.describe(ctx, claim, wd, ark, declared, held)
	carried = true
	return out, held, err
}

// fileList is the job's file list: its manifest node's, or the one kept in
// its working folder dir that the node names (a list too long for a node).
func (p *Processor) fileList(ctx context.Context, claim stage.Job, dir string) (*v1.Manifest, error) {
	m, err := claim.LoadManifest(ctx)
	if err != nil || m.GetKept() == nil {
		return m, err
	}
	root, err := workdir.At(p.WorkRoot)
	if err != nil {
		return nil, err
	}
	return root.FileList(dir, m)
}

// describe writes the system files of the job's object, named ark by
// identify, and its storage manifest; the job's commit releases unlock.
func (p *Processor) describe(ctx context.Context, claim stage.Job, wd, ark string, declared *v1.Manifest, unlock []*jobs.ObjectLock) (stage.Outcome, error) {
	job := claim.Data()
	conf := job.GetConfiguration()
	localIDs := claim.Data().GetIdentifiers().GetLocalId()
	obj := sysfiles.Object{ARK: ark, LocalIDs: localIDs, Metadata: job.GetMetadata()}
	// An attempt that died while writing the system files left their
	// temporary files in system/, which is stored whole.
	for _, name := range []string{sysfiles.ERCName, sysfiles.DublinCoreName, sysfiles.IngestName, sysfiles.DeleteName} {
		if err := store.RemoveTemps(filepath.Join(wd, filelist.System, name)); err != nil {
			return stage.Outcome{}, failf("system files of %s: %v", ark, err)
		}
	}
	if err := sysfiles.Write(filepath.Join(wd, filelist.System), obj); err != nil {
		return stage.Outcome{}, failf("system files of %s: %v", ark, err)
	}
	// gofail: var processorERCWritten struct{}
	mode := submissionMode(conf)
	var deletions []string
	if p.Merritt != nil {
		var err error
		if deletions, err = updateDeletions(wd, mode); err != nil {
			return stage.Outcome{}, failf("the files %s deletes: %v", ark, err)
		}
		rec := merrittstore.IngestRecord{Batch: job.GetBid(), Job: claim.ID(), Object: ark, Profile: conf.GetProfileName(),
			StorageService: p.Merritt.Storage.BaseURL, StorageNode: p.Merritt.Storage.Node}
		if err := sysfiles.WriteMerritt(filepath.Join(wd, filelist.System), rec.Bytes(), deletions); err != nil {
			return stage.Outcome{}, failf("system files of %s: %v", ark, err)
		}
	}
	if conf.GetPayloadType() == v1.PayloadType_PAYLOAD_TYPE_CONTAINER {
		declared = nil // it names the archive, which the downloader unpacked
	}
	entries, seen, err := filelist.List(ctx, wd, declared)
	if err != nil {
		return stage.Outcome{}, failf("checking the files of %s: %v", ark, err)
	}
	if deletions != nil {
		// The deletion list is the update's instruction, kept in system/,
		// not a file of the object.
		entries = slices.DeleteFunc(entries, func(e checkm.Entry) bool { return e.FileName == deleteListFile })
	}
	manifest := filepath.Join(wd, StorageManifest)
	if err := store.WriteManifest(manifest, entries); err != nil {
		return stage.Outcome{}, failf("storage manifest of %s: %v", ark, err)
	}
	// gofail: var processorManifestWritten struct{}
	change := jobs.Change{
		Message: fmt.Sprintf("processed %s (%d files): to be stored", ark, len(entries)),
		// What the storing step stores, as the peer library's store node
		// says it: the storage manifest, and the version's mode.
		Store:  &v1.Store{ManifestUrl: checkm.FileURL(manifest), Mode: mode},
		Unlock: unlock,
	}
	if p.Merritt != nil {
		// As Merritt's storage consumer reads the store node: the add
		// manifest it passes to the service, where the service fetches it,
		// and "<add|update>/<node>/<ARK>"; as Merritt's inventory service
		// reads the inventory node: the object's manifest on the node.
		am, err := p.Merritt.Serving.WriteAddManifest(wd, entries)
		if err != nil {
			return stage.Outcome{}, failf("add manifest of %s: %v", ark, err)
		}
		change.Store = &v1.Store{ManifestUrl: am.URL, Mode: merrittstore.Mode(mode, p.Merritt.Storage.Node, ark), Deletions: deletions}
		change.Inventory = &v1.Inventory{ManifestUrl: p.Merritt.Storage.ManifestURL(ark), Mode: mode}
	}
	if p.storing && p.Merritt == nil {
		p.digested.put(claim, change.Store.GetManifestUrl(), seen)
	}
	p.logger().InfoContext(ctx, "object processed", "ark", ark, "files", len(entries))
	return stage.Next(change), nil
}

// deleteListFile is where a depositor lists the files an update removes,
// one a line, as Merritt's ingest service reads it.
var deleteListFile = filelist.Producer + "/" + sysfiles.DeleteName

// updateDeletions reads an update's list of files to remove: each line of
// producer/mrt-delete.txt names a file of the object, "producer/" added
// where the line leaves it out, as Merritt's ingest service reads it. It is
// nil for an add and for an update without the file.
func updateDeletions(wd, mode string) ([]string, error) {
	if mode != merrittstore.ActionUpdate {
		return nil, nil
	}
	data, err := os.ReadFile(filepath.Join(wd, filepath.FromSlash(deleteListFile)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := []string{}
	seen := map[string]bool{} // an update may remove 100,000 files
	for _, line := range merrittstore.ParseDeleteList(string(data)) {
		if !strings.HasPrefix(line, filelist.Producer+"/") {
			line = filelist.Producer + "/" + line
		}
		if !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	return out, nil
}

// submissionMode is the job's mode as the store and inventory nodes spell it.
func submissionMode(conf *v1.JobConfiguration) string {
	if conf.GetSubmissionMode() == v1.SubmissionMode_SUBMISSION_MODE_UPDATE {
		return "update"
	}
	return "add"
}

// identify settles the job's ARK: the one the depositor gave, else the one
// its local ids (of owner) are bound to, else a new one; it is in the job's
// identifiers in ZooKeeper before the local ids are bound to it. The
// caller holds the local id locks meanwhile (lockLocalIDs) and keeps them
// until the job's commit, which releases them in its own request, where a
// release of its own would cost two (a look at the node's owner and a
// delete).
func (p *Processor) identify(ctx context.Context, claim stage.Job, owner string) (string, error) {
	ids := claim.Data().GetIdentifiers()
	ark := ids.GetPrimaryId()
	bound, boundBy := "", ""
	for _, lid := range ids.GetLocalId() {
		got, err := p.Queue.LookupLocalID(ctx, owner, lid)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			continue
		case errors.Is(err, queue.ErrInvalid):
			return "", failf("local id %q: %v", lid, err)
		case err != nil:
			return "", fmt.Errorf("looking up local id %s: %w", lid, err)
		case ark != "" && got != ark:
			return "", failf("local id %s is bound to %s but the depositor gave %s", lid, got, ark)
		case bound != "" && got != bound:
			return "", failf("local ids %s and %s are bound to different ARKs (%s, %s)", boundBy, lid, bound, got)
		}
		bound, boundBy = got, lid
	}
	if ark == "" && bound != "" {
		ark = bound
		next := &v1.Identifiers{}
		if ids != nil {
			next = proto.Clone(ids).(*v1.Identifiers)
		}
		next.PrimaryId = ark
		if err := claim.Update(ctx, jobs.Change{Identifiers: next}); err != nil {
			return "", fmt.Errorf("recording %s: %w", ark, err)
		}
	}
	if ark == "" {
		minted, err := p.Minter.Mint(ctx, claim)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, queue.ErrFenced) || errors.Is(err, queue.ErrNoSession) {
				return "", err
			}
			return "", failf("minting an ARK: %v", err)
		}
		ark = minted
		p.logger().InfoContext(ctx, "ARK minted", "ark", ark)
	}
	// gofail: var processorMinted struct{}
	for _, lid := range ids.GetLocalId() {
		got, err := p.Queue.BindLocalID(ctx, owner, lid, ark)
		if err != nil {
			return "", fmt.Errorf("binding local id %s: %w", lid, err)
		}
		if got != ark {
			return "", failf("local id %s is bound to %s, not to this job's %s", lid, got, ark)
		}
	}
	return ark, nil
}

// lockLocalIDs takes /locks/localid/<local id>_<owner> for each of the
// job's local ids, and for all of them together as Merritt's ingest
// service names a job's ("a;b_<owner>"), so that no other processor,
// ingestq's or Merritt's, looks up or mints an ARK for one of them
// meanwhile. A lock someone holds releases those taken and is ErrLocked.
// The locks are ephemeral: a processor that dies frees them. A job without
// local ids takes none.
func (p *Processor) lockLocalIDs(ctx context.Context, localIDs []string, owner string) ([]*jobs.ObjectLock, error) {
	var names []string
	for _, lid := range localIDs {
		if lid != "" && !slices.Contains(names, lid) {
			names = append(names, lid)
		}
	}
	if len(names) > 1 {
		names = append(names, strings.Join(localIDs, ";"))
	}
	slices.Sort(names)
	var held []*jobs.ObjectLock
	for _, lid := range names {
		l, err := p.Queue.LockLocalID(ctx, lid, owner)
		if errors.Is(err, queue.ErrInvalid) {
			p.unlock(ctx, held)
			return nil, failf("local id %q: %v", lid, err)
		}
		if err != nil {
			p.unlock(ctx, held)
			return nil, err
		}
		held = append(held, l)
	}
	return held, nil
}

// owner is whose local ids the job's are: its profile's owner, or its
// collection, or its profile name.
func (p *Processor) owner(conf *v1.JobConfiguration) string {
	if p.Profiles != nil {
		if pr, ok := p.Profiles.Get(conf.GetProfileName()); ok && pr.Owner != "" {
			return pr.Owner
		}
	}
	if c := conf.GetCollection(); c != "" {
		return c
	}
	return conf.GetProfileName()
}

// workingDir checks that the job's working folder is a folder inside the
// work root, also once symbolic links are resolved (workdir.Folder): a link
// cannot lead the processor to store files from elsewhere. The folder is
// checked by path, not opened through an os.Root as the downloader does,
// because the path is handed on: the store node names the storage manifest
// by a file:// URL that the storing step, or Merritt's storage, reads.
func (p *Processor) workingDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("the job has no working_dir")
	}
	return workdir.Folder(p.WorkRoot, dir)
}

func (p *Processor) lockRetry() time.Duration {
	if p.LockRetry > 0 {
		return p.LockRetry
	}
	return 3 * time.Second
}

func (p *Processor) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}
