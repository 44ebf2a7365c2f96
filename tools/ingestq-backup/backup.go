package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// manifestFile describes a backup; it is written last, so a backup
// without it is incomplete.
const manifestFile = "backup.json"

// manifest is backup.json.
type manifest struct {
	// Created is when the queue was quiet and every part was taken.
	Created time.Time `json:"created"`
	// Zxid is the last ZooKeeper transaction the copy holds.
	Zxid string `json:"zxid"`
	// PausedBefore: the queue was paused by an operator before the
	// backup; the restored queue should stay paused.
	PausedBefore bool `json:"paused_before"`
	// PausedFor is how long the backup held the queue paused.
	PausedFor string `json:"paused_for"`
	// JobsByState are the queue's jobs per state at that moment.
	JobsByState map[string]int32 `json:"jobs_by_state"`
	// Parts are what the backup holds, by name: zookeeper, inventory,
	// work, store.
	Parts map[string]partStats `json:"parts"`
}

type partStats struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

type createOptions struct {
	queue        *queueClient
	zkServers    []string
	parts        parts
	out          string
	quietTimeout time.Duration
	link         bool
}

// create takes a backup (see the package documentation).
func create(ctx context.Context, o createOptions, w io.Writer) (err error) {
	q := o.queue
	if err := q.dial(); err != nil {
		return err
	}
	defer q.close()
	before, err := q.getQueue(ctx)
	if err != nil {
		return err
	}
	m := manifest{PausedBefore: before.GetPaused(), Parts: map[string]partStats{}}
	if !m.PausedBefore {
		fmt.Fprintln(w, "pausing the queue")
		if err := q.pause(ctx); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, "the queue is paused already; it stays paused")
	}
	pausedAt := time.Now()
	unpaused := false
	defer func() {
		if m.PausedBefore || unpaused {
			return
		}
		// Whatever failed, the queue does not stay paused by the backup.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer cancel()
		if uerr := q.unpause(uctx); uerr != nil {
			err = errors.Join(err, fmt.Errorf("the queue is still paused by this backup: %w", uerr))
		} else {
			fmt.Fprintln(w, "unpaused the queue")
		}
	}()
	if err := q.waitQuiet(ctx, o.quietTimeout); err != nil {
		return err
	}
	quiet, err := q.getQueue(ctx)
	if err != nil {
		return err
	}
	m.JobsByState = quiet.GetJobsByState()
	fmt.Fprintf(w, "quiet after %s: no job step or batch in flight\n", time.Since(pausedAt).Round(time.Millisecond))

	id, st, err := copyZooKeeper(ctx, o.zkServers, o.parts.zkData, o.parts.zkDatalog, filepath.Join(o.out, "zookeeper"))
	if err != nil {
		return err
	}
	m.Zxid, m.Created = id, time.Now().UTC()
	m.Parts["zookeeper"] = partStats{st.files, st.bytes}
	fmt.Fprintf(w, "zookeeper: %d files, %d bytes, at zxid %s (%d server(s) agree)\n", st.files, st.bytes, id, len(o.zkServers))
	if o.parts.inventory != "" {
		pages, err := backupInventory(ctx, o.parts.inventory, filepath.Join(o.out, "inventory.db"))
		if err != nil {
			return err
		}
		fi, err := os.Stat(filepath.Join(o.out, "inventory.db"))
		if err != nil {
			return err
		}
		m.Parts["inventory"] = partStats{1, fi.Size()}
		fmt.Fprintf(w, "inventory: %d pages (SQLite online backup, integrity ok)\n", pages)
	}
	for _, p := range []struct{ name, dir string }{{"work", o.parts.work}, {"store", o.parts.store}} {
		if p.dir == "" {
			continue
		}
		st, err := copyTree(p.dir, filepath.Join(o.out, p.name), o.link)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		m.Parts[p.name] = partStats{st.files, st.bytes}
		fmt.Fprintf(w, "%s: %d files, %d bytes (%d linked)\n", p.name, st.files, st.bytes, st.links)
	}
	if !m.PausedBefore {
		if err := q.unpause(ctx); err != nil {
			return fmt.Errorf("the queue is still paused by this backup: %w", err)
		}
		unpaused = true
	}
	m.PausedFor = time.Since(pausedAt).Round(time.Millisecond).String()
	if !m.PausedBefore {
		fmt.Fprintf(w, "unpaused the queue after %s\n", m.PausedFor)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, manifestFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "backup written to %s\n", o.out)
	return nil
}

// readManifest reads a backup's backup.json.
func readManifest(dir string) (*manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: not a backup, or an incomplete one", dir, manifestFile)
	}
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, manifestFile), err)
	}
	return &m, nil
}

// restore lays a backup out for servers that have not started: the
// ZooKeeper files into a server's data directories, the inventory, the
// working storage and the store. Every target must be new or empty, and
// every part restored (those of only; empty: every part the backup holds)
// must be given one.
func restore(from string, p parts, only []string, w io.Writer) error {
	m, err := readManifest(from)
	if err != nil {
		return err
	}
	if len(only) > 0 {
		for _, name := range only {
			if _, ok := m.Parts[name]; !ok {
				return fmt.Errorf("restore: -parts names %q, which the backup does not hold (it holds %s)", name, strings.Join(slices.Sorted(maps.Keys(m.Parts)), ", "))
			}
		}
		for name := range m.Parts {
			if !slices.Contains(only, name) {
				delete(m.Parts, name)
			}
		}
	}
	targets := map[string]string{"zookeeper": p.zkData, "inventory": p.inventory, "work": p.work, "store": p.store}
	flags := map[string]string{"zookeeper": "-zk-data", "inventory": "-inventory", "work": "-work", "store": "-store"}
	var missing []string
	for name := range m.Parts {
		if targets[name] == "" {
			missing = append(missing, flags[name])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("restore: the backup holds parts without a target: give %s", strings.Join(missing, ", "))
	}
	for name, t := range targets {
		if _, ok := m.Parts[name]; t != "" && !ok {
			return fmt.Errorf("restore: %s given, but %s is not restored (the backup has no %s, or -parts leaves it out)", flags[name], name, name)
		}
	}
	if err := emptyOrMissing(filepath.Join(p.zkData, "version-2")); p.zkData != "" && err != nil {
		return fmt.Errorf("restore: -zk-data: %w", err)
	}
	if p.zkDatalog != "" {
		if err := emptyOrMissing(filepath.Join(p.zkDatalog, "version-2")); err != nil {
			return fmt.Errorf("restore: -zk-datalog: %w", err)
		}
	}
	for _, name := range []string{"work", "store"} {
		if targets[name] != "" {
			if err := emptyOrMissing(targets[name]); err != nil {
				return fmt.Errorf("restore: %s: %w", flags[name], err)
			}
		}
	}
	if p.inventory != "" {
		if _, err := os.Stat(p.inventory); err == nil {
			return fmt.Errorf("restore: -inventory: %s exists", p.inventory)
		}
	}

	if p.zkData != "" {
		if err := restoreZooKeeper(from, p, m, w); err != nil {
			return err
		}
	}
	if p.inventory != "" {
		var st stats
		if err := copyFile(filepath.Join(from, "inventory.db"), p.inventory, false, &st); err != nil {
			return fmt.Errorf("restore: inventory: %w", err)
		}
		if err := verify("inventory", m, st); err != nil {
			return err
		}
		if err := checkInventory(context.Background(), p.inventory); err != nil {
			return err
		}
		fmt.Fprintf(w, "inventory: %s (integrity ok)\n", p.inventory)
	}
	for _, name := range []string{"work", "store"} {
		if targets[name] == "" {
			continue
		}
		st, err := copyTree(filepath.Join(from, name), targets[name], false)
		if err != nil {
			return fmt.Errorf("restore: %s: %w", name, err)
		}
		if err := verify(name, m, st); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %d files, %d bytes into %s\n", name, st.files, st.bytes, targets[name])
	}
	state := "running"
	if m.PausedBefore {
		state = "paused (an operator had paused it before the backup)"
	}
	fmt.Fprintf(w, "restored the backup of %s; the queue starts paused: start ZooKeeper, then the services, run Fsck, and unpause (it was %s)\n",
		m.Created.Format(time.RFC3339), state)
	return nil
}

// restoreZooKeeper puts snapshots and epochs in the data directory and
// transaction logs in the log directory when the server keeps them apart.
func restoreZooKeeper(from string, p parts, m *manifest, w io.Writer) error {
	var st stats
	for _, sub := range []string{"data", "datalog"} {
		src := filepath.Join(from, "zookeeper", sub, "version-2")
		entries, err := os.ReadDir(src)
		if errors.Is(err, fs.ErrNotExist) && sub == "datalog" {
			continue
		}
		if err != nil {
			return fmt.Errorf("restore: zookeeper: %w", err)
		}
		for _, e := range entries {
			dest := p.zkData
			if strings.HasPrefix(e.Name(), "log.") && p.zkDatalog != "" {
				dest = p.zkDatalog
			}
			if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dest, "version-2", e.Name()), false, &st); err != nil {
				return fmt.Errorf("restore: zookeeper: %w", err)
			}
		}
	}
	if err := verify("zookeeper", m, st); err != nil {
		return err
	}
	fmt.Fprintf(w, "zookeeper: %d files at zxid %s into %s\n", st.files, m.Zxid, p.zkData)
	return nil
}

// verify checks that a part restored holds what the backup recorded.
func verify(name string, m *manifest, st stats) error {
	want := m.Parts[name]
	if st.files != want.Files || st.bytes != want.Bytes {
		return fmt.Errorf("restore: %s: %d files, %d bytes restored; the backup recorded %d files, %d bytes", name, st.files, st.bytes, want.Files, want.Bytes)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
