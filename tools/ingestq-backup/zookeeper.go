package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// zxid asks a ZooKeeper server (the srvr four-letter word, which every
// deployment file allows) for the last transaction it applied.
func zxid(ctx context.Context, addr string) (string, error) {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("zookeeper %s: %w", addr, err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := io.WriteString(conn, "srvr"); err != nil {
		return "", fmt.Errorf("zookeeper %s: srvr: %w", addr, err)
	}
	sc := bufio.NewScanner(io.LimitReader(conn, 64<<10))
	var id, mode string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Zxid: "); ok {
			id = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Mode: "); ok {
			mode = strings.TrimSpace(v)
		}
		if strings.Contains(line, "is not executed because it is not in the whitelist") {
			return "", fmt.Errorf("zookeeper %s: srvr is not allowed: add it to 4lw.commands.whitelist (ZOO_4LW_COMMANDS_WHITELIST)", addr)
		}
	}
	if id == "" || mode == "" {
		return "", fmt.Errorf("zookeeper %s: srvr: no Zxid and Mode: the server does not serve (no quorum?)", addr)
	}
	return id, nil
}

// ensembleZxid is the last transaction every server applied; it fails
// unless all agree (a follower still catching up, or a write under way).
func ensembleZxid(ctx context.Context, servers []string) (string, error) {
	var first string
	for i, s := range servers {
		id, err := zxid(ctx, s)
		if err != nil {
			return "", err
		}
		if i == 0 {
			first = id
		} else if id != first {
			return "", fmt.Errorf("servers disagree: %s at %s, %s at %s", servers[0], first, s, id)
		}
	}
	return first, nil
}

// zookeeperFiles are the files of a ZooKeeper data directory that hold
// the tree: version-2/ (snapshots, transaction logs, the quorum's epochs).
func zookeeperFiles(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "version-2"))
	if err != nil {
		return nil, fmt.Errorf("zookeeper data: %w (want a server's dataDir, holding version-2)", err)
	}
	var files []os.DirEntry
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, e)
		}
	}
	return files, nil
}

// fileState is a file's size and modification time: what a write changes.
type fileState struct {
	size  int64
	mtime time.Time
}

func statAll(dir string, entries []os.DirEntry) (map[string]fileState, error) {
	out := map[string]fileState{}
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, "version-2", e.Name()))
		if err != nil {
			return nil, err
		}
		out[e.Name()] = fileState{fi.Size(), fi.ModTime()}
	}
	return out, nil
}

func sameFiles(a, b map[string]fileState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w.size != v.size || !w.mtime.Equal(v.mtime) {
			return false
		}
	}
	return true
}

// copyZooKeeper copies the tree's files of one server's data directories
// into dest/data (and dest/datalog) while no transaction is applied: the
// ensemble's zxid and the files are the same before and after the copy,
// else it copies again. The queue being paused and quiet, only session
// and worker-heartbeat transactions come, seconds apart.
func copyZooKeeper(ctx context.Context, servers []string, dataDir, logDir, dest string) (id string, st stats, err error) {
	dirs := []struct{ from, to string }{{dataDir, filepath.Join(dest, "data")}}
	if logDir != "" {
		dirs = append(dirs, struct{ from, to string }{logDir, filepath.Join(dest, "datalog")})
	}
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return "", stats{}, ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
		if err := os.RemoveAll(dest); err != nil {
			return "", stats{}, err
		}
		before, err := ensembleZxid(ctx, servers)
		if err != nil {
			lastErr = err
			continue
		}
		st = stats{}
		stable := true
		for _, d := range dirs {
			entries, err := zookeeperFiles(d.from)
			if err != nil {
				return "", stats{}, err
			}
			s0, err := statAll(d.from, entries)
			if err != nil {
				return "", stats{}, err
			}
			for _, e := range entries {
				if err := copyFile(filepath.Join(d.from, "version-2", e.Name()), filepath.Join(d.to, "version-2", e.Name()), false, &st); err != nil {
					return "", stats{}, err
				}
			}
			s1, err := statAll(d.from, entries)
			if err != nil {
				return "", stats{}, err
			}
			stable = stable && sameFiles(s0, s1)
		}
		after, err := ensembleZxid(ctx, servers)
		if err != nil {
			lastErr = err
			continue
		}
		if stable && before == after {
			if st.files == 0 {
				return "", stats{}, fmt.Errorf("zookeeper data %s: no file in version-2", dataDir)
			}
			return after, st, nil
		}
		lastErr = fmt.Errorf("a transaction came during the copy (zxid %s, then %s)", before, after)
	}
	return "", stats{}, errors.Join(errors.New("zookeeper: no copy without a transaction during it in 20 attempts"), lastErr)
}
