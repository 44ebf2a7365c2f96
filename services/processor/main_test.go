package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/metadata"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_PROFILES_DIR", servicetest.ExampleProfiles(t))
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	t.Setenv("INGESTQ_STORE_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "processor")
}

// helloJob puts a job of one file in Processing, its working folder under
// workRoot.
func helloJob(t *testing.T, q *session.Session, workRoot string) string {
	t.Helper()
	wd := filepath.Join(workRoot, "bid0000000001", "jid0000000001")
	if err := os.MkdirAll(filepath.Join(wd, "producer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "producer", "hello.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	return queuetest.Spawn(t, q, batches.NewJob{
		Configuration: &v1.JobConfiguration{ProfileName: "demo", Collection: "demo", WorkingDir: wd,
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE},
		Identifiers: &v1.Identifiers{LocalId: []string{"hello-1"}},
		Metadata:    &v1.Metadata{Who: "Doe, Jane", What: "Hello", When: "2026"},
		Manifest:    &v1.Manifest{Files: []*v1.ManifestFile{{Url: "http://127.0.0.1:1/hello.txt", Name: "hello.txt", Size: 5}}},
	}, queue.Processing)
}

// stages asks the replica's StageService for its workers' stages.
func stages(t *testing.T, addr, token string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	st, err := v1.NewStageServiceClient(servicetest.Dial(t, addr)).GetStatus(ctx, &v1.GetStatusRequest{})
	if err != nil {
		t.Fatalf("StageService.GetStatus: %v", err)
	}
	var out []string
	for _, w := range st.GetWorkers() {
		out = append(out, w.GetStage())
	}
	slices.Sort(out)
	return out
}

// registered is the stages of the processor's entries in the worker registry.
func registered(t *testing.T, q *session.Session) []string {
	t.Helper()
	workers, err := admin.New(q).Queue.ListWorkers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range workers {
		if w.GetService() == "processor" {
			out = append(out, w.GetStage())
		}
	}
	slices.Sort(out)
	return out
}

func TestBuiltProcessorStoresAJobAndHandsItToRecording(t *testing.T) {
	bin := servicetest.Build(t, ".")
	zkRoot := zktest.Root(t)
	workRoot, storeRoot := t.TempDir(), t.TempDir()
	const token = "processor-admin-token"
	p := servicetest.Start(t, bin, zkRoot, "INGESTQ_PROFILES_DIR="+servicetest.ExampleProfiles(t), "INGESTQ_WORK_ROOT="+workRoot,
		"INGESTQ_STORE_ROOT="+storeRoot, "INGESTQ_MINT_SHOULDER=ark:/99999/fk5", "INGESTQ_ADMIN_TOKEN="+token)

	q := queuetest.Connect(t, zkRoot)
	// One replica runs both steps: both show in its StageService and in
	// the worker registry.
	if got := stages(t, p.Addr, token); !slices.Equal(got, []string{"Processing", "Storing"}) {
		t.Errorf("StageService workers take %v, want [Processing Storing]", got)
	}
	queuetest.Eventually(t, "both steps are registered", func() bool {
		return slices.Equal(registered(t, q), []string{"Processing", "Storing"})
	})
	jid := helloJob(t, q, workRoot)
	var job *v1.Job
	queuetest.Eventually(t, "the processor is done with the job", func() bool {
		var err error
		job, err = jobs.NewReader(q).GetJob(context.Background(), jid)
		st := job.GetStatus().GetStatus()
		return err == nil && st != queue.Processing && st != queue.Storing
	})
	if st := job.GetStatus(); st.GetStatus() != queue.Recording || st.GetLastSuccessfulStatus() != queue.Storing {
		t.Fatalf("job %s %q after %s, want Recording after Storing", queue.JobStateName(st.GetStatus()), st.GetMessage(),
			queue.JobStateName(st.GetLastSuccessfulStatus()))
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if !strings.HasPrefix(ark, "ark:/99999/fk5") {
		t.Errorf("ARK %q is not on the configured shoulder", ark)
	}
	want := checkm.FileURL(filepath.Join(storeRoot, queue.LockName(ark), "v1", "manifest.checkm"))
	if job.GetInventory().GetManifestUrl() != want || job.GetInventory().GetVersion() != 1 {
		t.Errorf("inventory %v, want version 1 at %q", job.GetInventory(), want)
	}
	stored, err := os.ReadFile(filepath.Join(storeRoot, queue.LockName(ark), "v1", "producer", "hello.txt"))
	if err != nil || string(stored) != "hello" {
		t.Errorf("stored file: %q, %v", stored, err)
	}
	// The sample profile's owner binds the local id.
	if bound, err := jobs.New(q).LookupLocalID(context.Background(), "ark:/99999/fk4owner", "hello-1"); err != nil || bound != ark {
		t.Errorf("hello-1 bound to %q (%v), want %s", bound, err, ark)
	}
}

func TestBuiltProcessorWithStoringOffLeavesProcessedJobsInStoring(t *testing.T) {
	bin := servicetest.Build(t, ".")
	zkRoot := zktest.Root(t)
	workRoot, storeRoot := t.TempDir(), t.TempDir()
	const token = "processor-admin-token"
	p := servicetest.Start(t, bin, zkRoot, "INGESTQ_PROFILES_DIR="+servicetest.ExampleProfiles(t), "INGESTQ_WORK_ROOT="+workRoot,
		"INGESTQ_STORE_ROOT="+storeRoot, "INGESTQ_ADMIN_TOKEN="+token, "INGESTQ_STORING=false")

	if got := stages(t, p.Addr, token); !slices.Equal(got, []string{"Processing"}) {
		t.Errorf("StageService workers take %v, want [Processing]: another consumer owns Storing", got)
	}
	q := queuetest.Connect(t, zkRoot)
	jid := helloJob(t, q, workRoot)
	var job *v1.Job
	queuetest.Eventually(t, "the job is processed", func() bool {
		var err error
		job, err = jobs.NewReader(q).GetJob(context.Background(), jid)
		return err == nil && job.GetStatus().GetStatus() != queue.Processing && !job.GetLocked()
	})
	if st := job.GetStatus(); st.GetStatus() != queue.Storing {
		t.Fatalf("job %s %q, want Storing", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if !strings.HasSuffix(job.GetStore().GetManifestUrl(), "/storage-manifest.checkm") || job.GetInventory() != nil {
		t.Errorf("store %v, inventory %v; want the storage manifest named and no inventory", job.GetStore(), job.GetInventory())
	}
	if des, err := os.ReadDir(storeRoot); err != nil || len(des) != 0 {
		t.Errorf("the store holds %v (%v), want nothing", des, err)
	}
	if got := registered(t, q); !slices.Equal(got, []string{"Processing"}) {
		t.Errorf("the registry holds processor workers taking %v, want [Processing]", got)
	}
}

func TestBuiltProcessorStoresIntoAnS3BucketWithCredentialsFromTheEnvironment(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.CreateBucket(t)
	bin := servicetest.Build(t, ".")
	zkRoot := zktest.Root(t)
	workRoot := t.TempDir()
	servicetest.Start(t, bin, zkRoot, "INGESTQ_PROFILES_DIR="+servicetest.ExampleProfiles(t), "INGESTQ_WORK_ROOT="+workRoot,
		"INGESTQ_STORE=s3", "INGESTQ_S3_ENDPOINT="+srv.Endpoint, "INGESTQ_S3_BUCKET="+bucket, "INGESTQ_S3_REGION="+srv.Region,
		"AWS_ACCESS_KEY_ID="+srv.Access, "AWS_SECRET_ACCESS_KEY="+srv.Secret, "INGESTQ_ADMIN_TOKEN=processor-admin-token")
	q := queuetest.Connect(t, zkRoot)
	jid := helloJob(t, q, workRoot)
	var job *v1.Job
	queuetest.Eventually(t, "the processor is done with the job", func() bool {
		var err error
		job, err = jobs.NewReader(q).GetJob(context.Background(), jid)
		st := job.GetStatus().GetStatus()
		return err == nil && st != queue.Processing && st != queue.Storing
	})
	if st := job.GetStatus(); st.GetStatus() != queue.Recording {
		t.Fatalf("job %s %q, want Recording", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if want := "s3://" + bucket + "/" + queue.LockName(ark) + "/v1/manifest.checkm"; job.GetInventory().GetManifestUrl() != want {
		t.Errorf("inventory %v, want the manifest at %s", job.GetInventory(), want)
	}
	out, err := srv.Client(t).GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket),
		Key: aws.String(queue.LockName(ark) + "/v1/producer/hello.txt")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	if data, err := io.ReadAll(out.Body); err != nil || string(data) != "hello" {
		t.Errorf("stored file: %q, %v", data, err)
	}
}

func TestBuiltProcessorStoresThroughMerrittsStorageService(t *testing.T) {
	svc := merritttest.Start(t, 3)
	bin := servicetest.Build(t, ".")
	zkRoot := zktest.Root(t)
	workRoot := t.TempDir()
	servicetest.Start(t, bin, zkRoot, "INGESTQ_PROFILES_DIR="+servicetest.ExampleProfiles(t), "INGESTQ_WORK_ROOT="+workRoot,
		"INGESTQ_STORE=merritt", "INGESTQ_MERRITT_STORAGE_URL="+svc.URL, "INGESTQ_MERRITT_NODE=3",
		"INGESTQ_MERRITT_SERVE_LISTEN="+servicetest.FreeAddr(t))
	q := queuetest.Connect(t, zkRoot)
	jid := helloJob(t, q, workRoot)
	var job *v1.Job
	queuetest.Eventually(t, "the processor is done with the job", func() bool {
		var err error
		job, err = jobs.NewReader(q).GetJob(context.Background(), jid)
		st := job.GetStatus().GetStatus()
		return err == nil && st != queue.Processing && st != queue.Storing
	})
	if st := job.GetStatus(); st.GetStatus() != queue.Recording {
		t.Fatalf("job %s %q, want Recording", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if string(svc.Files(3, ark, 1)["producer/hello.txt"]) != "hello" || job.GetInventory().GetManifestUrl() != svc.URL+"/manifest/3/"+merrittstore.Encode(ark) {
		t.Errorf("node 3 holds %v of %s; inventory %v", svc.Files(3, ark, 1), ark, job.GetInventory())
	}
}

func TestMerrittSettingsThatCannotWorkAreRefused(t *testing.T) {
	work := t.TempDir()
	for _, c := range []struct {
		name, store, url, listen, serveURL string
		node                               int
		storing                            bool
		want                               string
	}{
		{"the store without a node", "merritt", "", "127.0.0.1:1", "", 0, true, "INGESTQ_STORE=merritt needs"},
		{"a node with versions stored elsewhere", "local", "http://s:1", "127.0.0.1:1", "", 3, true, "INGESTQ_STORE=merritt"},
		{"no address to serve versions on", "merritt", "http://s:1", "", "", 3, true, "INGESTQ_MERRITT_SERVE_LISTEN is needed"},
		{"an address no other host reaches", "local", "http://s:1", ":7415", "", 3, false, "INGESTQ_MERRITT_SERVE_URL is needed"},
		{"a node without the service", "merritt", "", "127.0.0.1:1", "", 3, true, "go together"},
		{"a storage URL without its port", "merritt", "http://store.example.org/store", "127.0.0.1:1", "", 3, true, "names no port"},
		{"handed over", "local", "http://s:1", ":7415", "http://processor.example.org:7415", 3, false, ""},
	} {
		timeout := time.Minute
		s := settings{workRoot: &work, storing: &c.storing, store: &s3store.StoreSettings{Kind: c.store},
			merritt: &merrittstore.Settings{URL: &c.url, Node: &c.node, Timeout: &timeout}, serveListen: &c.listen, serveURL: &c.serveURL}
		m, err := s.merrittTarget()
		switch {
		case c.want == "" && (err != nil || m == nil):
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
