// Package filelist lists the files of an object in a job's working folder
// (producer/ and system/) with their size and SHA-256, checking each file
// against what the job's manifest declared: the storage manifest is built
// from it.
package filelist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/digest"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/checkm"
)

// Folders of a working folder that hold the object.
const (
	Producer = "producer"
	System   = "system"
)

// Algorithm is the digest every listed file gets.
const Algorithm = "sha256"

// MismatchError is a file that is not what the job's manifest declared.
type MismatchError struct {
	File string // producer/…
	Msg  string
}

func (e *MismatchError) Error() string { return e.File + ": " + e.Msg }

// List reads every file under workDir/producer and workDir/system. When
// declared is not nil, producer/ must hold exactly its files (by name), each
// of the declared size and digest where one is given; a difference is a
// *MismatchError. Symbolic links and other non-regular files are refused.
// seen is each file as it was read, by name (store.Request.Digested).
func List(ctx context.Context, workDir string, declared *v1.Manifest) (entries []checkm.Entry, seen map[string]store.Seen, err error) {
	want := make(map[string]*v1.ManifestFile, len(declared.GetFiles()))
	for _, f := range declared.GetFiles() {
		want[path.Join(Producer, f.GetName())] = f
	}
	// The system files, a handful, come beside the declared ones.
	entries = make([]checkm.Entry, 0, len(want)+8)
	seen = make(map[string]store.Seen, len(want)+8)
	found := 0 // declared files found
	for _, top := range []string{Producer, System} {
		root := filepath.Join(workDir, top)
		if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
			continue // checked below: producer/ must hold files, system/ may be absent
		}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			rel, err := filepath.Rel(workDir, p)
			if err != nil {
				return err
			}
			name := filepath.ToSlash(rel)
			// The storage manifest lists every file by name: one it cannot
			// carry fails here, named once, not when the manifest is written.
			if err := checkm.CheckFileName(name); err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return fmt.Errorf("%s is not a regular file (%s)", name, d.Type())
			}
			decl := want[name]
			if declared != nil && decl == nil && top == Producer {
				return &MismatchError{File: name, Msg: "is not in the job's manifest"}
			}
			if decl != nil {
				found++
			}
			e, fi, err := describe(ctx, p, name, decl)
			if err != nil {
				return err
			}
			entries = append(entries, e)
			if s, ok := store.SeenOf(fi); ok {
				seen[name] = s
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", root, err)
		}
	}
	if declared != nil && found < len(want) {
		return nil, nil, missing(entries, want)
	}
	if !slices.ContainsFunc(entries, func(e checkm.Entry) bool { return strings.HasPrefix(e.FileName, Producer+"/") }) {
		return nil, nil, fmt.Errorf("%s holds no file", filepath.Join(workDir, Producer))
	}
	slices.SortFunc(entries, func(a, b checkm.Entry) int { return strings.Compare(a.FileName, b.FileName) })
	return entries, seen, nil
}

// describe digests one file and checks it against its declaration; fi is
// the file read, as it was once read.
func describe(ctx context.Context, p, name string, decl *v1.ManifestFile) (checkm.Entry, fs.FileInfo, error) {
	f, err := os.Open(p)
	if err != nil {
		return checkm.Entry{}, nil, err
	}
	defer f.Close()
	n, sums, err := digest.Copy(ctx, io.Discard, f, Algorithm, decl.GetHashAlgorithm())
	if err != nil {
		return checkm.Entry{}, nil, fmt.Errorf("reading %s: %w", name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return checkm.Entry{}, nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if decl != nil {
		if decl.GetSize() >= 0 && decl.GetSize() != n {
			return checkm.Entry{}, nil, &MismatchError{File: name, Msg: fmt.Sprintf("size is %d bytes, the manifest says %d", n, decl.GetSize())}
		}
		if alg := decl.GetHashAlgorithm(); alg != "" && !strings.EqualFold(sums[alg], decl.GetHashValue()) {
			return checkm.Entry{}, nil, &MismatchError{File: name, Msg: fmt.Sprintf("%s is %s, the manifest says %s", alg, sums[alg], decl.GetHashValue())}
		}
	}
	return checkm.Entry{FileURL: checkm.FileURL(p), HashAlgorithm: Algorithm, HashValue: sums[Algorithm], FileSize: n, FileName: name}, fi, nil
}

// missing reports the first declared file that is not in entries.
func missing(entries []checkm.Entry, want map[string]*v1.ManifestFile) error {
	have := make(map[string]bool, len(entries))
	for _, e := range entries {
		have[e.FileName] = true
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !have[name] {
			return &MismatchError{File: name, Msg: "is in the job's manifest but was not downloaded"}
		}
	}
	return nil
}
