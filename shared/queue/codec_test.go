package queue

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var stamp = timestamppb.New(time.Date(2026, 11, 22, 3, 51, 7, 0, time.UTC))

// TestCodecWritesTheSpecsJSON pins the exact bytes that land in ZooKeeper.
func TestCodecWritesTheSpecsJSON(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"new job status has null last_successful_status",
			EncodeJobStatus(&v1.JobStatus{Status: Pending, LastModified: stamp}),
			`{"status":"Pending","last_modified":"2026-11-22 03:51:07 +0000","message":"","last_successful_status":null,"retry_count":0}`},
		{"resumed job status",
			EncodeJobStatus(&v1.JobStatus{Status: Downloading, LastModified: stamp, Message: "requeued", LastSuccessfulStatus: Provisioning, RetryCount: 1}),
			`{"status":"Downloading","last_modified":"2026-11-22 03:51:07 +0000","message":"requeued","last_successful_status":"Provisioning","retry_count":1}`},
		{"batch status spells UpdateReporting",
			EncodeBatchStatus(&v1.BatchStatus{Status: BatchUpdateReporting, LastModified: stamp}),
			`{"status":"UpdateReporting","last_modified":"2026-11-22 03:51:07 +0000","message":""}`},
		{"status report with empty lists",
			encodeStatusReport(&v1.StatusReport{LastModified: stamp}),
			`{"last_modified":"2026-11-22 03:51:07 +0000","failed_jobs":[],"successful_jobs":[]}`},
		{"identifiers",
			EncodeIdentifiers(&v1.Identifiers{PrimaryId: "ark:/99999/fk4x", LocalId: []string{"loc001"}}),
			`{"primary_id":"ark:/99999/fk4x","local_id":["loc001"]}`},
		{"metadata keeps & and < unescaped",
			EncodeMetadata(&v1.Metadata{Who: "Smith & Jones", What: "<Letters>", When: "1921"}),
			`{"erc_who":"Smith & Jones","erc_what":"<Letters>","erc_when":"1921","erc_where":""}`},
		{"store without a version is the Merritt library's",
			EncodeStore(&v1.Store{ManifestUrl: "file:///s/v1/manifest.checkm", Mode: "add"}),
			`{"manifest_url":"file:///s/v1/manifest.checkm","mode":"add","delete":""}`},
		{"store of an update with deletions, one file id a line",
			EncodeStore(&v1.Store{ManifestUrl: "http://h/m", Mode: "update/7/ark%3A%2F1%2Fx", Deletions: []string{"producer/a.txt", "producer/b c.txt"}}),
			`{"manifest_url":"http://h/m","mode":"update/7/ark%3A%2F1%2Fx","delete":"producer/a.txt\nproducer/b c.txt\n"}`},
		{"store with its version",
			EncodeStore(&v1.Store{ManifestUrl: "file:///s/v2/manifest.checkm", Mode: "update", Version: 2}),
			`{"manifest_url":"file:///s/v2/manifest.checkm","mode":"update","delete":"","version":2}`},
		{"inventory without a version is the Merritt library's",
			EncodeInventory(&v1.Inventory{ManifestUrl: "file:///s/v1/manifest.checkm", Mode: "add"}),
			`{"manifest_url":"file:///s/v1/manifest.checkm","mode":"add"}`},
		{"inventory with its version",
			EncodeInventory(&v1.Inventory{ManifestUrl: "file:///s/v2/manifest.checkm", Mode: "update", Version: 2}),
			`{"manifest_url":"file:///s/v2/manifest.checkm","mode":"update","version":2}`},
		{"priority is decimal text", EncodeInt(5), `5`},
		{"space_needed is decimal text", EncodeInt(1000000000), `1000000000`},
		{"submission flattens erc fields",
			EncodeSubmission(&v1.Submission{ProfileName: "p", Submitter: "s", PayloadUrl: "http://h/x", Type: v1.PayloadType_PAYLOAD_TYPE_FILE,
				SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD, Metadata: &v1.Metadata{What: "t"}}),
			`{"profile_name":"p","submitter":"s","payload_url":"http://h/x","erc_who":"","erc_what":"t","erc_when":"","erc_where":"","type":"file","submission_mode":"add"}`},
		{"submission's uuid is batchID, as the peer library reads it",
			EncodeSubmission(&v1.Submission{ProfileName: "p", Type: v1.PayloadType_PAYLOAD_TYPE_FILE, BatchId: "5c3a-uuid"}),
			`{"profile_name":"p","submitter":"","payload_url":"","erc_who":"","erc_what":"","erc_when":"","erc_where":"","type":"file","submission_mode":"","batchID":"5c3a-uuid"}`},
		{"a job's configuration names its jid as jobID",
			EncodeJobConfiguration("jid0000000042", &v1.JobConfiguration{ProfileName: "p", PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE, WorkingDir: "/w/j"}),
			`{"profile_name":"p","submitter":"","payload_url":"","payload_type":"file","response_type":"","submission_mode":"","working_dir":"/w/j","batch_entry":0,"jobID":"jid0000000042"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got  %s\nwant %s", tt.got, tt.want)
			}
		})
	}
}

func TestCodecReadsWhatPeersWrite(t *testing.T) {
	t.Run("job status without message", func(t *testing.T) {
		st, err := DecodeJobStatus("/x", []byte(`{"status":"Recording","last_modified":"2026-11-22 03:51:07 +0000","last_successful_status":"Processing","retry_count":2}`))
		if err != nil {
			t.Fatal(err)
		}
		want := &v1.JobStatus{Status: Recording, LastModified: stamp, LastSuccessfulStatus: Processing, RetryCount: 2}
		if !proto.Equal(st, want) {
			t.Errorf("got %v, want %v", st, want)
		}
	})
	t.Run("a time the layout cannot write back reads as unknown", func(t *testing.T) {
		for _, lm := range []string{"0000-01-01 00:30:00 +0100", "9999-12-31 23:30:00 -0100", "not a time"} {
			st, err := DecodeJobStatus("/x", []byte(`{"status":"Pending","last_modified":"`+lm+`"}`))
			if err != nil || st.GetLastModified() != nil {
				t.Errorf("last_modified %q: %v, %v; want no time", lm, st.GetLastModified(), err)
			}
		}
	})
	t.Run("store's delete: a list of file ids, or a word or a boolean that lists none", func(t *testing.T) {
		for raw, want := range map[string][]string{
			`"producer/a.txt\r\n\nproducer/b.txt"`: {"producer/a.txt", "producer/b.txt"},
			`"true"`:                               nil, `"False"`: nil, `true`: nil, `""`: nil,
		} {
			s, err := DecodeStore("/x", []byte(`{"manifest_url":"u","mode":"update","delete":`+raw+`}`))
			if err != nil || !slices.Equal(s.GetDeletions(), want) {
				t.Errorf("delete %s: %v, %v; want %q", raw, s.GetDeletions(), err, want)
			}
			// A "true" another writer put there is written back as it was.
			if written := string(EncodeStore(s)); strings.EqualFold(strings.Trim(raw, `"`), "true") != strings.Contains(written, `"delete":"true"`) {
				t.Errorf("delete %s written back as %s", raw, written)
			}
		}
	})
	t.Run("store and inventory without a version read as version 0", func(t *testing.T) {
		s, err := DecodeStore("/x", []byte(`{"manifest_url":"u","mode":"add","delete":"false"}`))
		if err != nil || s.GetVersion() != 0 || s.GetManifestUrl() != "u" {
			t.Errorf("store: %v, %v", s, err)
		}
		i, err := DecodeInventory("/x", []byte(`{"manifest_url":"u","mode":"add"}`))
		if err != nil || i.GetVersion() != 0 || i.GetManifestUrl() != "u" {
			t.Errorf("inventory: %v, %v", i, err)
		}
	})
	t.Run("round trip of every job node", func(t *testing.T) {
		conf := &v1.JobConfiguration{ProfileName: "p", PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS,
			SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_UPDATE, BatchEntry: 7, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		got, err := DecodeConfiguration("/x", encodeConfiguration(conf))
		if err != nil || !proto.Equal(got, conf) {
			t.Errorf("configuration: %v, %v", got, err)
		}
		m := &v1.Manifest{Files: []*v1.ManifestFile{{Url: "http://h/a", HashAlgorithm: "md5", HashValue: "00", Size: -1, Name: "a"}}}
		gotM, err := DecodeManifest("/x", EncodeManifest(m))
		if err != nil || !proto.Equal(gotM, m) {
			t.Errorf("manifest: %v, %v", gotM, err)
		}
		kept := &v1.Manifest{Kept: &v1.KeptFileList{Name: "file-list.json", Sha256: "ab", Bytes: 20 << 20, Files: 100000}}
		if data := string(EncodeManifest(kept)); data != `{"files":[],"kept":{"name":"file-list.json","sha256":"ab","bytes":20971520,"files":100000}}` {
			t.Errorf("kept manifest written %s", data)
		}
		gotK, err := DecodeManifest("/x", EncodeManifest(kept))
		if err != nil || !proto.Equal(gotK, &v1.Manifest{Files: []*v1.ManifestFile{}, Kept: kept.Kept}) {
			t.Errorf("kept manifest: %v, %v", gotK, err)
		}
		if _, err := DecodeManifest("/x", []byte(`{"files":[{"url":"u","name":"a","size":1}],"kept":{"name":"file-list.json"}}`)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a node with files and a kept list: %v; want it corrupt", err)
		}
		many := &v1.Manifest{}
		for i := range 300 {
			many.Files = append(many.Files, &v1.ManifestFile{Url: fmt.Sprintf("http://h/<%d>&", i), Size: int64(i) - 1, Name: fmt.Sprint(i), LastModified: "x"})
		}
		var list bytes.Buffer
		if err := WriteFileList(&list, many.Files); err != nil || list.String() != string(EncodeManifest(many)) {
			t.Errorf("a kept list is not written as the node would be: %v", err)
		}
		if FileListFitsNode(many) || !FileListFitsNode(m) || !FileListFitsNode(&v1.Manifest{Files: many.Files[:40]}) {
			t.Errorf("FileListFitsNode: 300 files %v, 1 %v, 40 %v (%d bytes); want false, true, true",
				FileListFitsNode(many), FileListFitsNode(m), FileListFitsNode(&v1.Manifest{Files: many.Files[:40]}), len(EncodeManifest(&v1.Manifest{Files: many.Files[:40]})))
		}
		read, err := ReadFileList("/x", strings.NewReader(list.String()+"trailing"))
		if err != nil || !proto.Equal(read, many) {
			t.Errorf("kept list read back: %v", err)
		}
		for _, bad := range []string{``, `[]`, `{"files":{}}`, `{"kept":{}}`, `{"other":1}`, `{"files":[{"size":"x"}]}`, `{"files":[`} {
			if _, err := ReadFileList("/x", strings.NewReader(bad)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("kept list %q: %v; want it corrupt", bad, err)
			}
		}
		st := &v1.Store{ManifestUrl: "file:///s/v3/manifest.checkm", Mode: "update", Deletions: []string{"producer/x"}, Version: 3}
		gotS, err := DecodeStore("/x", EncodeStore(st))
		if err != nil || !proto.Equal(gotS, st) {
			t.Errorf("store: %v, %v", gotS, err)
		}
		inv := &v1.Inventory{ManifestUrl: "file:///s/v3/manifest.checkm", Mode: "update", Version: 3}
		gotI, err := DecodeInventory("/x", EncodeInventory(inv))
		if err != nil || !proto.Equal(gotI, inv) {
			t.Errorf("inventory: %v, %v", gotI, err)
		}
	})
}

func TestCodecRefusesBrokenNodesWithThePath(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"not JSON", func() error { _, err := DecodeJobStatus("/jobs/jid1/status", []byte("{oops")); return err }()},
		{"unknown status", func() error {
			_, err := DecodeJobStatus("/jobs/jid1/status", []byte(`{"status":"Dancing"}`))
			return err
		}()},
		{"unknown batch status", func() error {
			_, err := DecodeBatchStatus("/jobs/jid1/status", []byte(`{"status":"Sleeping"}`))
			return err
		}()},
		{"priority not a number", func() error { _, err := DecodeInt("/jobs/jid1/status", []byte("five")); return err }()},
		{"unknown payload type", func() error {
			_, err := DecodeConfiguration("/jobs/jid1/status", []byte(`{"payload_type":"floppy"}`))
			return err
		}()},
		{"unknown submission mode", func() error {
			_, err := DecodeConfiguration("/jobs/jid1/status", []byte(`{"payload_type":"file","submission_mode":"merge"}`))
			return err
		}()},
		{"unknown submission type", func() error {
			_, err := DecodeSubmission("/jobs/jid1/status", []byte(`{"type":"floppy","submission_mode":"add"}`))
			return err
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ce *CorruptError
			if !errors.As(tt.err, &ce) || !errors.Is(tt.err, ErrCorrupt) || ce.Path != "/jobs/jid1/status" {
				t.Errorf("err = %v, want a CorruptError naming the path", tt.err)
			}
		})
	}
}

func TestEntryNamesParseAndSortNumerically(t *testing.T) {
	got := SortedEntries([]string{"150-jid0000000001", "05-jid0000000009", "05-jid0000000002", "99-jid0000000003", "junk", "5-jid000000000x"})
	want := []string{"05-jid0000000002", "05-jid0000000009", "99-jid0000000003", "150-jid0000000001"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].Name != want[i] {
			t.Errorf("position %d: %s, want %s", i, got[i].Name, want[i])
		}
	}
	if LockName("ark:/99999/fk4x") != "ark_99999_fk4x" {
		t.Errorf("LockName = %s", LockName("ark:/99999/fk4x"))
	}
}

func TestARewriteKeepsTheKeysOfAnotherWriterAndDropsNoneOfItsOwn(t *testing.T) {
	known := jsonKeys(storeJSON{})
	written := EncodeStore(&v1.Store{ManifestUrl: "u2", Mode: "add"})
	tests := []struct {
		name, old, want string
	}{
		{"another writer's keys follow ingestq's, in their order",
			`{"manifest_url":"u1","node":9501,"mode":"add/9501/ark%3A","extra":{"a": [1, 2]}}`,
			`{"manifest_url":"u2","mode":"add","delete":"","node":9501,"extra":{"a":[1,2]}}`},
		{"ingestq's own keys are not brought back", `{"version":3,"delete":true}`, string(written)},
		{"a node that is not an object adds nothing", `["x"]`, string(written)},
		{"an empty node adds nothing", ``, string(written)},
		{"a key given twice is kept once", `{"k":1,"k":2}`,
			`{"manifest_url":"u2","mode":"add","delete":"","k":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := withKeysOf([]byte(tt.old), written, known); string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	if got := withKeysOf([]byte(`{"a":1}`), []byte(`{}`), nil); string(got) != `{"a":1}` {
		t.Errorf("into an empty object: %s", got)
	}
}

func TestCodecReadsMerrittsForms(t *testing.T) {
	sub, err := DecodeSubmission("/s", []byte(`{"batchID":"u","profile":"p","type":"batchManifestContainer","update":true,`+
		`"title":"T","creator":"C","date":"1921","submissionDate":"Sun Nov 22 03:51:07 UTC 2026","size":512}`))
	want := &v1.Submission{ProfileName: "p", Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS,
		SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_UPDATE, BatchId: "u", SubmissionDate: stamp,
		Metadata: &v1.Metadata{Who: "C", What: "T", When: "1921"}}
	if err != nil || !proto.Equal(sub, want) {
		t.Errorf("Merritt's submission read as %v, %v", sub, err)
	}
	conf, err := DecodeConfiguration("/c", []byte(`{"profile":"p","type":"manifest","update":"false","responseForm":"xml","jobID":"x"}`))
	wantConf := &v1.JobConfiguration{ProfileName: "p", PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
		SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD, ResponseType: "xml"}
	if err != nil || !proto.Equal(conf, wantConf) {
		t.Errorf("Merritt's configuration read as %v, %v", conf, err)
	}
	// An unknown word is an error, beside everything else that was read.
	sub, err = DecodeSubmission("/s", []byte(`{"profile":"p","type":"batchManifestFile"}`))
	if err == nil || !strings.Contains(err.Error(), `"batchManifestFile"`) || sub.GetProfileName() != "p" {
		t.Errorf("got %v, %v", sub, err)
	}
	if _, err := DecodeSubmission("/s", []byte(`{"profile":{"name":"p"}}`)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("an object where text belongs: %v", err)
	}
}
