package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBackup writes a backup of a work folder of one file and a ZooKeeper
// data folder of one file.
func fakeBackup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "work", "bid0000000001", "a.txt"), "abc")
	writeFile(t, filepath.Join(dir, "zookeeper", "data", "version-2", "snapshot.1"), "snap")
	writeFile(t, filepath.Join(dir, "zookeeper", "data", "version-2", "log.2"), "log!!")
	m := manifest{Zxid: "0x2", Parts: map[string]partStats{"work": {1, 3}, "zookeeper": {2, 9}}}
	b, _ := json.Marshal(m)
	writeFile(t, filepath.Join(dir, manifestFile), string(b))
	return dir
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestARestoreRefusesWhatItCannotDoWhole(t *testing.T) {
	from := fakeBackup(t)
	target := t.TempDir()
	for _, c := range []struct {
		name string
		p    parts
		only []string
		want string
	}{
		{"a part without a target", parts{zkData: filepath.Join(target, "zk")}, nil, "give -work"},
		{"a target without a part", parts{zkData: filepath.Join(target, "zk"), work: filepath.Join(target, "w"), store: filepath.Join(target, "s")}, nil, "-store given"},
		{"a part the backup does not hold", parts{}, []string{"inventory"}, `"inventory", which the backup does not hold`},
		{"a work folder that holds anything", parts{zkData: filepath.Join(target, "zk"), work: from}, nil, "not empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := restore(from, c.p, c.only, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("restore: %v, want an error saying %q", err, c.want)
			}
		})
	}
	if err := restore(t.TempDir(), parts{}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "no backup.json") {
		t.Errorf("restore of a folder without backup.json: %v", err)
	}
}

func TestARestoreLaysOutEachPartAndTheTransactionLogsApartWhenAsked(t *testing.T) {
	from := fakeBackup(t)
	target := t.TempDir()
	p := parts{zkData: filepath.Join(target, "data"), zkDatalog: filepath.Join(target, "datalog"), work: filepath.Join(target, "work")}
	if err := restore(from, p, nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"data/version-2/snapshot.1", "datalog/version-2/log.2", "work/bid0000000001/a.txt"} {
		if _, err := os.Stat(filepath.Join(target, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// One part alone, on another server of an ensemble.
	other := t.TempDir()
	if err := restore(from, parts{zkData: other}, []string{"zookeeper"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(other, "version-2", "log.2")); err != nil {
		t.Errorf("the log restored with the data, no log folder given: %v", err)
	}
}
