package download

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"

	cryptorand "crypto/rand"

	"github.com/ingestq/ingestq/shared/checkm"
)

// The partial files of a job, in its TempDir. A file being fetched is
// written to <key>.part, key naming its place in the job, so that the
// next attempt at the job (this replica's or another's, after a crash)
// finds it; every SyncEvery bytes the partial file is synced and then
// <key>.state saved beside it: how many bytes of it were synced, the
// digest's state after them, and what names the server's version of the
// file. An attempt holds an exclusive lock on the partial file it writes,
// so a replica that lost the job and still writes cannot share it: an
// attempt that finds it locked writes a one-off <key>.<random>.tmp,
// which no later attempt resumes. So does an attempt at a file declared
// smaller than SyncEvery: it is never synced before it is complete, so no
// other attempt could resume it.
const (
	partSuffix  = ".part"
	stateSuffix = ".state"
	tmpSuffix   = ".tmp"
)

// resumableName is the name of a partial file kept for resuming.
var resumableName = regexp.MustCompile(`^[0-9a-f]{32}\.(part|state)$`)

// savedState is a partial file's state file: the file it is part of, and
// what its first Offset bytes are.
type savedState struct {
	Dst       string `json:"dst"`
	URL       string `json:"url"`
	Algorithm string `json:"algorithm,omitempty"`
	Digest    string `json:"digest,omitempty"`
	Size      int64  `json:"size"` // as declared, -1 not declared
	Offset    int64  `json:"offset"`
	// Hash is the digest's state after Offset bytes
	// (encoding.BinaryMarshaler of Go's md5, sha1, sha256, sha512).
	Hash []byte `json:"hash,omitempty"`
	// Validator names the server's version of the file: what a resumed
	// request sends as If-Range.
	Validator string `json:"validator,omitempty"`
	Total     int64  `json:"total"` // the whole file's size as the server said, -1 not known
}

// partial is the partial file one fetch writes.
type partial struct {
	root      *os.Root
	name      string // its path in root
	stateName string // its state's path; "" for a one-off file
	file      *os.File
	hash      hash.Hash // nil without a declared digest
	// offset is how many bytes the file (and the hash) hold; synced how
	// many of them the saved state vouches for (0: none saved).
	offset, synced int64
	// A save runs beside the download (saveBehind), one at a time: saving
	// receives its outcome, of the first saving bytes; saved is where the
	// last save began.
	saving       chan error
	saved, ahead int64
	// validator, total: as the server described the file (see savedState).
	validator string
	total     int64
	// rangeable: the rest of the file may be asked for with a range, the
	// bytes so far being the server's file's (a validator names its
	// version, or the declared digest will tell).
	rangeable bool
	// spliced: the file's bytes came in more than one answer, or from an
	// earlier attempt.
	spliced bool
	// distrusted says why a partial file found was not used, "" when none
	// was found or it was.
	distrusted string
}

// key names the partial files of dst.
func key(dst string) string {
	sum := sha256.Sum256([]byte(dst))
	return hex.EncodeToString(sum[:16])
}

// openPartial opens the partial file of dst for f: the one an earlier
// attempt left, when its saved state vouches for it (its bytes up to the
// state's offset kept, the rest cut), else an empty one.
func (fe *Fetcher) openPartial(root *os.Root, dst string, f File) (*partial, error) {
	if err := root.MkdirAll(fe.TempDir, 0o755); err != nil {
		return nil, &localError{err}
	}
	h, _ := checkm.NewHash(f.HashAlgorithm)
	k := key(dst)
	p := &partial{root: root, name: path.Join(fe.TempDir, k+partSuffix), stateName: path.Join(fe.TempDir, k+stateSuffix), hash: h, total: -1}
	if fe.SyncEvery <= 0 || (f.Size >= 0 && f.Size < fe.SyncEvery) {
		// Never synced, so never resumed by another attempt: a file of
		// this attempt's own, at no cost beyond the one it had always.
		return p.oneOff(fe.TempDir, k)
	}
	file, fi, err := openLocked(root, p.name)
	if err != nil {
		return nil, err
	}
	if file == nil {
		// Another attempt writes it still (a replica that lost the job
		// and has not noticed yet): leave it, write a file of our own.
		return p.oneOff(fe.TempDir, k)
	}
	p.file = file
	if fi.Size() == 0 {
		return p, nil // nothing to resume; a state left beside it is replaced at the first sync
	}
	if err := p.resume(dst, f, fi.Size()); err != nil {
		p.discard()
		return nil, err
	}
	return p, nil
}

// oneOff makes p a partial file of this attempt's own, which no later
// attempt resumes.
func (p *partial) oneOff(dir, k string) (*partial, error) {
	p.name = path.Join(dir, k+"."+strings.ToLower(cryptorand.Text())+tmpSuffix)
	p.stateName = ""
	f, err := p.root.OpenFile(p.name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, &localError{err}
	}
	p.file = f
	return p, nil
}

// openLocked opens name, creating it, and locks it. The lock is of the
// file the name holds: a file removed or replaced between the open and
// the lock (by the attempt that held it) is let go and the name opened
// again. The file is nil when another attempt holds the lock.
func openLocked(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	for range 10 {
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, &localError{err}
		}
		ok, err := lockFile(f)
		if err != nil || !ok {
			f.Close()
			if err != nil {
				err = &localError{fmt.Errorf("locking %s: %w", name, err)}
			}
			return nil, nil, err
		}
		held, err1 := f.Stat()
		named, err2 := root.Lstat(name)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return f, held, nil
		}
		f.Close()
	}
	return nil, nil, nil
}

// resume takes up the partial file found, of size bytes, from its saved
// state; one that cannot be trusted is emptied, saying why.
func (p *partial) resume(dst string, f File, size int64) error {
	st, why := p.readState(dst, f)
	if why == "" && size < st.Offset {
		why = fmt.Sprintf("it is %d bytes, shorter than the %d its saved state vouches for", size, st.Offset)
	}
	if why == "" && p.hash != nil {
		if u, ok := p.hash.(encoding.BinaryUnmarshaler); !ok {
			why = "its digest's state cannot be restored"
		} else if err := u.UnmarshalBinary(st.Hash); err != nil {
			why = fmt.Sprintf("its saved digest state is unreadable: %v", err)
		}
	}
	if why != "" {
		p.distrusted = fmt.Sprintf("the partial file of an earlier attempt (%d bytes) was not used: %s", size, why)
		return p.reset()
	}
	if err := p.file.Truncate(st.Offset); err != nil {
		return &localError{err}
	}
	if _, err := p.file.Seek(st.Offset, io.SeekStart); err != nil {
		return &localError{err}
	}
	p.offset, p.synced, p.saved = st.Offset, st.Offset, st.Offset
	p.validator, p.total, p.rangeable, p.spliced = st.Validator, st.Total, true, true
	return nil
}

// readState reads the saved state of the partial file, and says why it
// cannot be trusted for dst and f ("" when it can).
func (p *partial) readState(dst string, f File) (savedState, string) {
	var st savedState
	data, err := fs.ReadFile(p.root.FS(), p.stateName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return st, "no saved state beside it"
	case err != nil:
		return st, fmt.Sprintf("reading its saved state: %v", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Sprintf("its saved state is unreadable: %v", err)
	}
	switch {
	case st.Dst != dst || st.URL != f.URL || st.Algorithm != f.HashAlgorithm || st.Digest != f.HashValue || st.Size != f.Size:
		return st, "its saved state is of another file (the file list changed)"
	case st.Offset <= 0 || (st.Validator == "" && st.Algorithm == ""):
		return st, "its saved state vouches for nothing"
	}
	return st, ""
}

// write appends b to the file and the digest.
func (p *partial) write(b []byte) error {
	if _, err := p.file.Write(b); err != nil {
		return &localError{err}
	}
	if p.hash != nil {
		p.hash.Write(b)
	}
	p.offset += int64(len(b))
	return nil
}

// due reports whether every bytes were written since the last save began.
func (p *partial) due(every int64) bool {
	return every > 0 && p.stateName != "" && p.rangeable && p.offset-p.saved >= every
}

// save makes the bytes written durable, then the state that vouches for
// them: a crash at any moment leaves a state no longer than the synced
// bytes.
func (p *partial) save(dst string, f File) error {
	p.settle() // its error is this save's to meet again
	data, err := p.state(dst, f)
	if err != nil || data == nil {
		return err
	}
	if err := p.store(data); err != nil {
		return err
	}
	p.synced, p.saved = p.offset, p.offset
	return nil
}

// saveBehind begins a save of the bytes written so far and lets the
// download go on meanwhile: the network need not wait for the disk. The
// state the save writes, once its sync returns, vouches for the bytes up
// to where it began, no further. A save still running when the next is
// due is waited for, so at most one runs; its error is the caller's.
func (p *partial) saveBehind(dst string, f File) error {
	if err := p.settle(); err != nil {
		return err
	}
	data, err := p.state(dst, f)
	if err != nil {
		return err
	}
	if data == nil {
		p.saved = p.offset
		return nil
	}
	done := make(chan error, 1)
	p.saving, p.ahead, p.saved = done, p.offset, p.offset
	go func() {
		// Under no recover of the handler's: a panic (the robustness
		// build's failpoint) fails the file, as one in its goroutine does.
		defer func() {
			if r := recover(); r != nil {
				done <- &localError{fmt.Errorf("internal error saving the partial file: %v", r)}
			}
		}()
		done <- p.store(data)
	}()
	return nil
}

// settle waits for the save running beside the download, if any, and
// returns its error.
func (p *partial) settle() error {
	if p.saving == nil {
		return nil
	}
	err := <-p.saving
	p.saving = nil
	if err == nil {
		p.synced = p.ahead
	}
	return err
}

// state is the saved state of the file's bytes so far; nil for a digest
// whose state cannot be kept: nothing to vouch with.
func (p *partial) state(dst string, f File) ([]byte, error) {
	st := savedState{Dst: dst, URL: f.URL, Algorithm: f.HashAlgorithm, Digest: f.HashValue, Size: f.Size,
		Offset: p.offset, Validator: p.validator, Total: p.total}
	if p.hash != nil {
		m, ok := p.hash.(encoding.BinaryMarshaler)
		if !ok {
			return nil, nil
		}
		var err error
		if st.Hash, err = m.MarshalBinary(); err != nil {
			return nil, &localError{fmt.Errorf("saving the digest's state: %w", err)}
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, &localError{err}
	}
	return data, nil
}

// store syncs the file, then writes data, the state that vouches for the
// bytes it held when data was taken.
func (p *partial) store(data []byte) error {
	if err := p.file.Sync(); err != nil {
		return &localError{err}
	}
	// gofail: var downloaderStateUnsynced struct{}
	tmp := p.stateName + tmpSuffix
	if err := writeSynced(p.root, tmp, data); err != nil {
		return &localError{err}
	}
	if err := p.root.Rename(tmp, p.stateName); err != nil {
		return &localError{err}
	}
	return nil
}

// writeSynced writes data to name, synced.
func writeSynced(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// reset empties the file: its state is removed first, so no state ever
// vouches for bytes the file no longer holds (a save running beside the
// download ends before).
func (p *partial) reset() error {
	if err := p.settle(); err != nil {
		return err
	}
	if p.stateName != "" {
		if err := p.root.Remove(p.stateName); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &localError{err}
		}
	}
	if err := p.file.Truncate(0); err != nil {
		return &localError{err}
	}
	if _, err := p.file.Seek(0, io.SeekStart); err != nil {
		return &localError{err}
	}
	if p.hash != nil {
		p.hash.Reset()
	}
	p.offset, p.synced, p.saved = 0, 0, 0
	p.validator, p.total, p.rangeable, p.spliced = "", -1, false, false
	return nil
}

// keepable reports whether the file is worth keeping for a later attempt
// at the job: resumable, and at least every bytes long.
func (p *partial) keepable(every int64) bool {
	return every > 0 && p.stateName != "" && p.rangeable && p.offset >= every
}

// stop ends the fetch before the file is complete: the file is saved for
// a later attempt when keepable, else removed.
func (p *partial) stop(dst string, f File, every int64) error {
	if !p.keepable(every) {
		p.discard()
		return nil
	}
	err := p.save(dst, f)
	p.file.Close()
	if err != nil {
		p.removeFiles()
	}
	return err
}

// discard removes the partial file and its state, then lets go of its
// lock (removed under the lock, no other attempt takes it up meanwhile).
func (p *partial) discard() {
	p.settle() // its state goes with the file
	p.removeFiles()
	p.file.Close()
}

func (p *partial) removeFiles() {
	p.root.Remove(p.name)
	if p.stateName != "" {
		p.root.Remove(p.stateName)
	}
}

// finish puts the complete file at dst, its lock held until it is there.
func (p *partial) finish(dst string) error {
	if err := p.settle(); err != nil {
		p.discard()
		return err
	}
	if dir := path.Dir(dst); dir != "." {
		if err := p.root.MkdirAll(dir, 0o755); err != nil {
			p.discard()
			return &localError{err}
		}
	}
	if err := p.root.Rename(p.name, dst); err != nil {
		p.discard()
		return &localError{err}
	}
	if p.synced > 0 {
		p.root.Remove(p.stateName)
	}
	if err := p.file.Close(); err != nil {
		return &localError{err}
	}
	return nil
}

// RemovePartial deletes what attempts at the job left in root's TempDir
// that no attempt will resume: one-off partial files, state files being
// written, state files without their partial file, and partial files of
// other names. The partial files kept for resuming stay.
func (fe *Fetcher) RemovePartial(root *os.Root) error {
	entries, err := fs.ReadDir(root.FS(), fe.TempDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	for _, e := range entries {
		n := e.Name()
		var remove bool
		switch {
		case strings.HasSuffix(n, tmpSuffix):
			remove = true
		case strings.HasSuffix(n, partSuffix):
			remove = !resumableName.MatchString(n)
		case strings.HasSuffix(n, stateSuffix):
			remove = !resumableName.MatchString(n) || !names[strings.TrimSuffix(n, stateSuffix)+partSuffix]
		}
		if remove {
			if err := root.Remove(path.Join(fe.TempDir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
