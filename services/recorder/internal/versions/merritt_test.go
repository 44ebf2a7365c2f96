package versions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/merritttest"
)

// storeInMerritt stores a version of ark made by job in the stand-in, as
// Merritt's storage service receives one: files served over HTTP, named by
// an add manifest.
func storeInMerritt(t *testing.T, c *merrittstore.Client, ark, job string, files map[string]string) {
	t.Helper()
	files[merrittstore.IngestRecordFile] = string(merrittstore.IngestRecord{Job: job, Object: ark}.Bytes())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(files[strings.TrimPrefix(r.URL.Path, "/")]))
	}))
	defer srv.Close()
	var rows []merrittstore.AddFile
	for name, body := range files {
		sum := sha256.Sum256([]byte(body))
		rows = append(rows, merrittstore.AddFile{URL: srv.URL + "/" + name, HashAlgorithm: "sha256", HashValue: hex.EncodeToString(sum[:]),
			Size: int64(len(body)), Name: name})
	}
	var m bytes.Buffer
	if err := merrittstore.WriteAddManifest(&m, rows); err != nil {
		t.Fatal(err)
	}
	files["mrt-manifest.txt"] = m.String()
	if _, err := c.Update(context.Background(), ark, merrittstore.Request{ManifestURL: srv.URL + "/mrt-manifest.txt"}); err != nil {
		t.Fatal(err)
	}
}

func TestAVersionOfMerrittsStorageServiceIsReadByNumberOrByTheJobItsRecordNames(t *testing.T) {
	svc := merritttest.Start(t, 5)
	url, node, timeout := svc.URL, 5, time.Minute
	c, err := merrittstore.Settings{URL: &url, Node: &node, Timeout: &timeout}.Client()
	if err != nil {
		t.Fatal(err)
	}
	const ark = "ark:/99999/fk4m"
	storeInMerritt(t, c, ark, "jid0000000001", map[string]string{"producer/a.txt": "alpha"})
	storeInMerritt(t, c, ark, "jid0000000002", map[string]string{"producer/b.txt": "beta!"})
	storeInMerritt(t, c, ark, "jid0000000003", map[string]string{"producer/c.txt": "gamma"})
	reader, err := merrittstore.Settings{URL: &url, Node: new(int), Timeout: &timeout}.Reader()
	if err != nil {
		t.Fatal(err)
	}
	s := Store{Merritt: reader}
	manifest := c.ManifestURL(ark)

	entries, number, err := s.Version(context.Background(), manifest, 0, "jid0000000002")
	if err != nil || number != 2 {
		t.Fatalf("the version job 2 made: %d, %v", number, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.FileName)
		if e.FileName == "producer/b.txt" && (e.FileSize != 5 || e.HashAlgorithm != "sha256") {
			t.Errorf("b.txt: %+v", e)
		}
	}
	// An update keeps the current version's files.
	if strings.Join(names, ",") != "producer/a.txt,producer/b.txt,system/mrt-ingest.txt" {
		t.Errorf("version 2 holds %v", names)
	}
	if _, number, err := s.Version(context.Background(), manifest, 3, "any"); err != nil || number != 3 {
		t.Errorf("version 3 by number: %d, %v", number, err)
	}
	if _, _, err := s.Version(context.Background(), manifest, 0, "jid0000000009"); err == nil || !strings.Contains(err.Error(), "jid0000000009") {
		t.Errorf("a job no version names: %v", err)
	}
	info, err := s.Describe(context.Background(), manifest, 1, "jid0000000001")
	if err != nil || info.FetchURL != manifest || info.FileCount != 2 {
		t.Errorf("Describe: %+v, %v", info, err)
	}
	if _, _, err := (Store{}).Version(context.Background(), manifest, 1, "x"); err == nil || !strings.Contains(err.Error(), "INGESTQ_MERRITT_STORAGE_URL") {
		t.Errorf("a recorder without the service: %v", err)
	}
	if _, _, err := s.Version(context.Background(), "http://elsewhere.example.org/manifest/5/x", 1, "x"); err == nil {
		t.Error("a manifest of another host was read")
	}
}
