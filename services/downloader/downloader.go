package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/downloader/internal/download"
	"github.com/ingestq/ingestq/services/downloader/internal/unpack"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/durable"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
)

// The layout of a job's working directory, as far as the downloader is concerned.
const (
	// producerDir holds the object's files, by their names in the file list.
	producerDir = "producer"
	// stagingDir holds partial files and a container's archive until it is
	// unpacked; nothing in it is part of the object.
	stagingDir = ".download"
	// archivePath is where a container is downloaded to.
	archivePath = stagingDir + "/container"
	// unpackedMarker says the container was unpacked completely into producer/.
	unpackedMarker = stagingDir + "/unpacked"
)

// Downloader fetches every file of a job into its working directory.
type Downloader struct {
	Files *download.Fetcher
	// WorkRoot is the working storage; a job's working_dir must lie inside.
	WorkRoot workdir.Root
	// Concurrency bounds the files of one job fetched at once.
	Concurrency int
	// PerHost bounds the jobs this replica downloads from one host at once
	// (a job counts for every host its files come from); a job whose host
	// is at its limit waits in the host's line (hostSlots), giving its
	// worker to other hosts' jobs unless its turn is due at once.
	PerHost int
	Unpack  unpack.Limits
	Logger  *slog.Logger
	// Durable makes a job's downloaded files durable before the job moves
	// on, sharing the sync with the jobs finishing at the same moment.
	Durable durable.Syncer

	hosts hostSlots
}

// Validate checks the settings.
func (d *Downloader) Validate() error {
	switch {
	case d.Files == nil || d.Files.Client == nil:
		return errors.New("downloader: no HTTP client")
	case d.WorkRoot.Dir() == "":
		return errors.New("downloader: no work root")
	case d.Concurrency < 1:
		return fmt.Errorf("download concurrency %d must be at least 1", d.Concurrency)
	case d.PerHost < 1:
		return fmt.Errorf("download jobs per host %d must be at least 1", d.PerHost)
	case d.Files.Retry.Attempts < 1:
		return fmt.Errorf("download attempts %d must be at least 1", d.Files.Retry.Attempts)
	case d.Files.Retry.Validate() != nil:
		return fmt.Errorf("download retry: %w", d.Files.Retry.Validate())
	case d.Files.MaxBytes <= 0:
		return fmt.Errorf("download max file bytes %d must be positive", d.Files.MaxBytes)
	case d.Files.SyncEvery < 0:
		return fmt.Errorf("download sync bytes %d must not be negative", d.Files.SyncEvery)
	case d.Durable.Linger < 0:
		return fmt.Errorf("sync linger %v must not be negative", d.Durable.Linger)
	case d.Unpack.MaxEntries < 1 || d.Unpack.MaxBytes < 1:
		return fmt.Errorf("unpack limits (%d entries, %d bytes) must be positive", d.Unpack.MaxEntries, d.Unpack.MaxBytes)
	}
	return nil
}

// StageConfig is the runner's configuration: Downloading → Processing.
func (d *Downloader) StageConfig() stage.Config {
	return stage.Config{
		Name:    "downloading",
		From:    queue.Downloading,
		To:      queue.Processing,
		Parts:   queue.PartConfiguration | queue.PartManifest,
		Handler: d.Handle,
	}
}

// Handle downloads the job's files (or its container, then unpacks it) and
// records the space they take. Any file that finally fails fails the job
// with a message naming the file, its URL and the reason.
func (d *Downloader) Handle(ctx context.Context, claim stage.Job) stage.Outcome {
	conf := claim.Data().GetConfiguration()
	m, err := d.fileList(ctx, claim)
	switch {
	case errors.Is(err, queue.ErrCorrupt):
		return stage.Failf("file list of the job unreadable: %v", err)
	case err != nil:
		d.Logger.WarnContext(ctx, "reading the job's file list", "error", err)
		return stage.Release()
	case len(m.GetFiles()) == 0:
		return stage.Fail("the job has no file list to download")
	}
	hosts := hostsOf(m)
	if full, wait := d.hosts.take(ctx, d.PerHost, claim.ID(), hosts); full != "" {
		d.Logger.DebugContext(ctx, "waiting: the host's downloads are at their limit", "host", full, "limit", d.PerHost, "wait", wait)
		return stage.Wait(wait, jobs.Change{})
	}
	defer d.hosts.give(claim.ID(), hosts)
	wd, err := claim.WorkingDir(ctx, d.WorkRoot.Dir())
	switch {
	case errors.Is(err, queue.ErrCorrupt):
		return stage.Failf("working directory: %v", err)
	case err != nil:
		d.Logger.WarnContext(ctx, "finding the job's working directory", "error", err)
		return stage.Release()
	}
	root, err := d.openWorkingDir(wd)
	if err != nil {
		return stage.Fail(err.Error())
	}
	defer root.Close()
	if err := d.Files.RemovePartial(root); err != nil {
		return stage.Failf("working directory %s: removing partial files: %v", wd, err)
	}
	var total int64
	var msg string
	if conf.GetPayloadType() == v1.PayloadType_PAYLOAD_TYPE_CONTAINER {
		total, msg, err = d.container(ctx, claim, root, m)
	} else {
		total, msg, err = d.files(ctx, root, m)
	}
	// gofail: var downloaderFilesWritten struct{}
	if ctx.Err() != nil {
		return stage.Release() // not committed: the lock is gone or a drain ran out
	}
	var room *roomError
	if errors.As(err, &room) {
		d.Logger.InfoContext(ctx, "waiting for room to unpack", "detail", room.msg)
		return stage.Wait(unpackRoomRetry, jobs.Change{Message: room.msg})
	}
	if err != nil {
		return stage.Fail(err.Error())
	}
	d.Logger.InfoContext(ctx, "job downloaded", "space_needed", total, "detail", msg)
	return stage.Next(jobs.Change{SpaceNeeded: &total, Message: msg})
}

// fileList is the job's file list: its manifest node's, or the one kept in
// its working folder that the node names (a list too long for a node).
func (d *Downloader) fileList(ctx context.Context, claim stage.Job) (*v1.Manifest, error) {
	m, err := claim.LoadManifest(ctx)
	if err != nil || m.GetKept() == nil {
		return m, err
	}
	wd, err := claim.WorkingDir(ctx, d.WorkRoot.Dir())
	if err != nil {
		return nil, err
	}
	return d.WorkRoot.FileList(wd, m)
}

// openWorkingDir opens the job's working directory, creating it, after
// checking that it lies inside the work root. It is opened through the
// root, so no link on the way can lead outside.
func (d *Downloader) openWorkingDir(wd string) (*os.Root, error) {
	if wd == "" {
		return nil, errors.New("the job has no working_dir")
	}
	rel, err := workdir.Within(d.WorkRoot.Dir(), wd)
	if err != nil {
		return nil, fmt.Errorf("working_dir %w", err)
	}
	work, err := os.OpenRoot(d.WorkRoot.Dir())
	if err != nil {
		return nil, fmt.Errorf("opening the work root: %w", err)
	}
	defer work.Close()
	if err := work.MkdirAll(rel, 0o750); err != nil {
		return nil, fmt.Errorf("creating working_dir %s: %w", wd, err)
	}
	root, err := work.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("opening working_dir %s: %w", wd, err)
	}
	if err := root.MkdirAll(producerDir, 0o755); err != nil {
		root.Close()
		return nil, fmt.Errorf("creating %s/%s: %w", wd, producerDir, err)
	}
	return root, nil
}

// errSibling stops the other downloads of a job once one file has failed.
var errSibling = errors.New("another file of the job failed")

// files fetches every listed file into producer/, Concurrency at once.
func (d *Downloader) files(ctx context.Context, root *os.Root, m *v1.Manifest) (int64, string, error) {
	files := m.GetFiles()
	seen := make(map[string]int, len(files))
	for i, f := range files {
		// The batcher checked the names; a file list written by anyone
		// else is checked again before anything is written.
		err := checkm.CheckFileName(f.GetName())
		if err == nil && !filepath.IsLocal(f.GetName()) {
			err = errors.New("not a local path")
		}
		if err != nil {
			return 0, "", fmt.Errorf("%s (%s): refused, the file would not land inside producer/: %v", f.GetName(), f.GetUrl(), err)
		}
		if j, dup := seen[f.GetName()]; dup {
			return 0, "", fmt.Errorf("%s (%s): file name listed twice (files %d and %d)", f.GetName(), f.GetUrl(), j+1, i+1)
		}
		seen[f.GetName()] = i
	}
	meter := stage.MeterOf(ctx)
	for _, f := range files {
		meter.Expect(f.GetSize())
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]download.Result, len(files))
	errs := make([]error, len(files))
	sem := make(chan struct{}, d.Concurrency)
	var wg sync.WaitGroup
	for i, f := range files {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			// Outside the stage runner's recover: a panic here fails the
			// job as one in the handler does, not the whole replica.
			defer func() {
				if p := recover(); p != nil {
					d.Logger.ErrorContext(ctx, "download panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
					errs[i] = fmt.Errorf("internal error in downloading: %v", p)
					cancel(errSibling)
				}
			}()
			results[i], errs[i] = d.Files.Fetch(ctx, root, producerDir+"/"+f.GetName(), fileOf(f))
			if errs[i] != nil {
				cancel(errSibling)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, errSibling) {
			return 0, "", fmt.Errorf("%s (%s): %v%s", files[i].GetName(), files[i].GetUrl(), err, restartedBecause(results[i]))
		}
	}
	if err := context.Cause(ctx); err != nil {
		return 0, "", err
	}
	// The files were renamed into place unsynced: a crash before this
	// leaves the job in Downloading, and its next attempt checks (and
	// keeps or fetches again) every file.
	wd := root.Name()
	paths := make([]string, 0, len(files))
	dirs := map[string]bool{wd: true}
	for _, f := range files {
		p := filepath.Join(wd, producerDir, filepath.FromSlash(f.GetName()))
		paths = append(paths, p)
		for d := filepath.Dir(p); d != wd; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	if err := d.Durable.Sync(ctx, d.WorkRoot.Dir(), paths, slices.Collect(maps.Keys(dirs))); err != nil {
		return 0, "", fmt.Errorf("making the files durable: %w", err)
	}
	var total int64
	reused := 0
	for _, r := range results {
		total += r.Size
		if r.Reused {
			reused++
		}
	}
	msg := fmt.Sprintf("downloaded %d files, %d bytes", len(files), total)
	if reused > 0 {
		msg += fmt.Sprintf(" (%d already complete from an earlier attempt)", reused)
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.GetName()
	}
	return total, msg + resumeNotes(names, results), nil
}

// container fetches the job's one archive and unpacks it into producer/;
// the archive is removed once unpacked. Before anything is unpacked, what
// the archive's headers declare is booked as the job's space (archive and
// files together), and a job whose container cannot fit the working storage
// even empty fails saying so, one that cannot fit now waits (roomError).
func (d *Downloader) container(ctx context.Context, claim stage.Job, root *os.Root, m *v1.Manifest) (int64, string, error) {
	if n := len(m.GetFiles()); n != 1 {
		return 0, "", fmt.Errorf("a container job lists %d files; want its one archive", n)
	}
	f := m.GetFiles()[0]
	if _, err := root.Stat(unpackedMarker); err == nil {
		total, files, err := producerBytes(root)
		if err != nil {
			return 0, "", fmt.Errorf("container %s already unpacked, but producer/ cannot be read: %w", f.GetName(), err)
		}
		return total, fmt.Sprintf("container %s already unpacked by an earlier attempt: %d files, %d bytes", f.GetName(), files, total), nil
	}
	fail := func(err error) (int64, string, error) {
		return 0, "", fmt.Errorf("%s (%s): %v", f.GetName(), f.GetUrl(), err)
	}
	meter := stage.MeterOf(ctx)
	meter.Expect(f.GetSize())
	got, err := d.Files.Fetch(ctx, root, archivePath, fileOf(f))
	if err != nil {
		return fail(fmt.Errorf("%v%s", err, restartedBecause(got)))
	}
	archive, err := root.Open(archivePath)
	if err != nil {
		return fail(err)
	}
	defer archive.Close()
	a, err := unpack.Open(ctx, archive, d.Unpack)
	if err != nil {
		return fail(fmt.Errorf("unpacking: %w", err))
	}
	if err := d.roomToUnpack(ctx, claim, got.Size, a.Declared()); err != nil {
		return 0, "", fmt.Errorf("%s (%s): %w", f.GetName(), f.GetUrl(), err)
	}
	// A partial unpacking by an attempt that died is started over.
	if err := root.RemoveAll(producerDir); err != nil {
		return fail(fmt.Errorf("clearing producer/: %w", err))
	}
	if err := root.Mkdir(producerDir, 0o755); err != nil {
		return fail(fmt.Errorf("creating producer/: %w", err))
	}
	producer, err := root.OpenRoot(producerDir)
	if err != nil {
		return fail(err)
	}
	defer producer.Close()
	st, err := a.Extract(ctx, producer)
	if err != nil {
		// Nothing of a refused archive is kept as the object; the archive
		// stays for an admin resume.
		root.RemoveAll(producerDir)
		root.Mkdir(producerDir, 0o755)
		return fail(fmt.Errorf("unpacking: %w", err))
	}
	// Its files were written unsynced: made durable together, before the
	// marker says they are all there.
	files, dirs, err := producerTree(root)
	if err == nil {
		err = d.Durable.Sync(ctx, d.WorkRoot.Dir(), files, dirs)
	}
	if err != nil {
		return fail(fmt.Errorf("making the unpacked files durable: %w", err))
	}
	if err := writeMarker(root, st); err != nil {
		return fail(err)
	}
	if err := root.Remove(archivePath); err != nil {
		return fail(fmt.Errorf("removing the unpacked archive: %w", err))
	}
	return st.Bytes, fmt.Sprintf("unpacked %s container %s: %d files, %d folders, %d bytes", st.Format, f.GetName(), st.Files, st.Dirs, st.Bytes) +
		resumeNotes([]string{f.GetName()}, []download.Result{got}), nil
}

// resumeNotes says, for the job's history, which files were resumed or
// started again and why: the first few of them, and how many more.
func resumeNotes(names []string, results []download.Result) string {
	const most = 3
	var notes []string
	more := 0
	for i, r := range results {
		if r.Resumes == 0 && r.Kept == 0 && len(r.Restarts) == 0 {
			continue
		}
		if len(notes) == most {
			more++
			continue
		}
		var parts []string
		if r.Kept > 0 {
			parts = append(parts, fmt.Sprintf("continued from byte %d of an earlier attempt's partial file", r.Kept))
		}
		if r.Resumes > 0 {
			parts = append(parts, fmt.Sprintf("resumed %d times where a transfer stopped", r.Resumes))
		}
		for _, why := range r.Restarts {
			parts = append(parts, "started again from its first byte: "+why)
		}
		notes = append(notes, names[i]+" "+strings.Join(parts, "; "))
	}
	if len(notes) == 0 {
		return ""
	}
	s := ". " + strings.Join(notes, ". ")
	if more > 0 {
		s += fmt.Sprintf(". %d more files resumed or started again", more)
	}
	return s
}

// restartedBecause says why a file that failed had been started again, if
// it was: a digest that does not match after the file changed on the
// server is the depositor's to fix.
func restartedBecause(r download.Result) string {
	if len(r.Restarts) == 0 {
		return ""
	}
	return " (it was started again from its first byte: " + r.Restarts[len(r.Restarts)-1] + ")"
}

// unpackRoomRetry is how long a container that has no room to unpack yet
// waits before it is looked at again.
const unpackRoomRetry = 15 * time.Second

// roomError is a container that cannot be unpacked now for want of room
// on the working storage: the job waits, its space booked.
type roomError struct{ msg string }

func (e *roomError) Error() string { return e.msg }

// roomToUnpack books the space a container takes while it is unpacked (its
// archive, and the files its headers declare) as the job's space_needed,
// which the provisioner counts for a job in Downloading, then checks that
// the files fit the working storage: never (the job fails), not now (a
// roomError), or now.
func (d *Downloader) roomToUnpack(ctx context.Context, claim stage.Job, archive int64, decl unpack.Stats) error {
	need := archive + decl.Bytes
	if need > claim.Data().GetSpaceNeeded() {
		if err := claim.Update(ctx, jobs.Change{SpaceNeeded: &need}); err != nil {
			// Nothing is unpacked unbooked: the job waits and tries again.
			return &roomError{msg: fmt.Sprintf("waiting to book the space to unpack (%s): %v", workdir.FormatBytes(need), err)}
		}
	}
	u, err := workdir.DiskUsage(d.WorkRoot.Dir())
	if err != nil {
		return fmt.Errorf("measuring the working storage: %w", err)
	}
	what := fmt.Sprintf("the %s container unpacks to %s in %d files; with its archive of %s it needs %s",
		decl.Format, workdir.FormatBytes(decl.Bytes), decl.Files, workdir.FormatBytes(archive), workdir.FormatBytes(need))
	switch {
	case uint64(need) > u.Total:
		return fmt.Errorf("%s, more than the working storage holds (%s)", what, workdir.FormatBytes(int64(u.Total)))
	case uint64(decl.Bytes) > u.Free:
		return &roomError{msg: fmt.Sprintf("waiting for room to unpack: %s, %s more than the archive, and the working storage has %s free of %s",
			what, workdir.FormatBytes(decl.Bytes), workdir.FormatBytes(int64(u.Free)), workdir.FormatBytes(int64(u.Total)))}
	}
	return nil
}

// producerTree lists the files and folders under producer/, for a sync of
// the platforms that sync path by path (package durable).
func producerTree(root *os.Root) (files, dirs []string, err error) {
	wd := root.Name()
	err = fs.WalkDir(root.FS(), producerDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		full := filepath.Join(wd, filepath.FromSlash(p))
		if e.IsDir() {
			dirs = append(dirs, full)
		} else {
			files = append(files, full)
		}
		return nil
	})
	return files, append(dirs, wd), err
}

// writeMarker records, durably, that producer/ holds the whole container.
func writeMarker(root *os.Root, st unpack.Stats) error {
	f, err := root.OpenFile(unpackedMarker, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("writing the unpacked marker: %w", err)
	}
	_, err = fmt.Fprintf(f, "%s %d files %d folders %d bytes\n", st.Format, st.Files, st.Dirs, st.Bytes)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the unpacked marker: %w", err)
	}
	return nil
}

// producerBytes sums the sizes of the files under producer/.
func producerBytes(root *os.Root) (total int64, files int, err error) {
	err = fs.WalkDir(root.FS(), producerDir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		total += fi.Size()
		files++
		return nil
	})
	return total, files, err
}

func fileOf(f *v1.ManifestFile) download.File {
	return download.File{URL: f.GetUrl(), HashAlgorithm: f.GetHashAlgorithm(), HashValue: f.GetHashValue(), Size: f.GetSize()}
}
