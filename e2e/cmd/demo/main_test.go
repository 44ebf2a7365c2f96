package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	_ "modernc.org/sqlite"
)

// TestUpHonoursTheCallersSettings runs what `make up` runs with an admin
// token and other INGESTQ_* settings in the caller's environment: every
// service gets the caller's token (the admin API refuses a call without it
// and a wrong one), the console signs in with it, and the printout says how
// to sign in without printing the token. With the built-in recorder off,
// the printout says so, where the outbox, store and work root are, and how
// to lease a job from the recorder at its address; a lease taken so
// carries a fetch_url on the recorder's server of versions, which serves
// the version's manifest to the token's holder.
func TestUpHonoursTheCallersSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	repo := filepath.Join("..", "..", "..")
	bin := filepath.Join(dir, "bin")
	if err := stack.Build(ctx, repo, bin); err != nil {
		t.Fatal(err)
	}
	const token = "s3cret-of-the-caller"
	// A console port of its own: 127.0.0.1:8401, the default, may be taken.
	environ := []string{"INGESTQ_ADMIN_TOKEN=" + token, "INGESTQ_LISTEN=127.0.0.1:1", "INGESTQ_LOG_LEVEL=debug",
		"INGESTQ_CONSOLE_LISTEN=" + servicetest.FreeAddr(t), "INGESTQ_RECORDER_BUILTIN=false"}
	pr, pw := io.Pipe()
	upCtx, stopUp := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- run(upCtx, pw, environ, bin, filepath.Join(repo, "examples"), filepath.Join(dir, "run"), true, "local")
		pw.Close()
	}()
	defer func() {
		stopUp()
		if err := <-ran; err != nil {
			t.Errorf("make up: %v", err)
		}
	}()
	var printed strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(printed.String(), "<fetch_url>)\n") {
		n, err := pr.Read(buf)
		printed.Write(buf[:n])
		if err != nil {
			t.Fatalf("make up ended before it was up: %v\n%s", err, printed.String())
		}
	}
	go io.Copy(io.Discard, pr) // the stop's lines
	out := printed.String()
	t.Log(out)
	for _, want := range []string{
		"Ignoring INGESTQ_LISTEN",
		"/signin with the admin token ($INGESTQ_ADMIN_TOKEN)",
		"in a shell where INGESTQ_ADMIN_TOKEN holds the token this stack was started with",
		`-H "authorization: Bearer $INGESTQ_ADMIN_TOKEN" `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the printout lacks %q", want)
		}
	}
	if strings.Contains(out, token) {
		t.Error("the printout shows the token")
	}
	recorder := regexp.MustCompile(`recorder +gRPC (\S+)`).FindStringSubmatch(out)
	versions := regexp.MustCompile(`versions +(http://\S+/versions/) `).FindStringSubmatch(out)
	depositorURL := regexp.MustCompile(`depositor +(http://\S+) `).FindStringSubmatch(out)
	if recorder == nil || versions == nil || depositorURL == nil {
		t.Fatalf("no recorder, versions or depositor address in the printout")
	}
	for _, want := range []string{
		"Recording: the built-in recorder is off (INGESTQ_RECORDER_BUILTIN=false)",
		`lease one:  grpcurl -plaintext -H "authorization: Bearer $INGESTQ_ADMIN_TOKEN" -d '{"wait":"30s","lease_duration":"120s"}' ` +
			recorder[1] + " ingestq.v1.RecordingService/Lease\n",
		"  outbox       " + filepath.Join(dir, "run"), "  store        " + filepath.Join(dir, "run"), "  work root    ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the printout lacks %q", want)
		}
	}
	batcher := regexp.MustCompile(`batcher +gRPC (\S+)`).FindStringSubmatch(out)
	console := regexp.MustCompile(`console +(http://\S+/) `).FindStringSubmatch(out)
	if batcher == nil || console == nil {
		t.Fatalf("no batcher or console address in the printout")
	}

	conn, err := grpc.NewClient(batcher[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := v1.NewAdminServiceClient(conn)
	for _, c := range []struct {
		name  string
		token string
		want  codes.Code
	}{{"no token", "", codes.Unauthenticated}, {"a wrong token", "wrong", codes.PermissionDenied}, {"the caller's token", token, codes.OK}} {
		callCtx := ctx
		if c.token != "" {
			callCtx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
		}
		_, err := admin.GetQueue(callCtx, &v1.GetQueueRequest{})
		if got := status.Code(err); got != c.want {
			t.Errorf("GetQueue with %s: %v, want %v", c.name, err, c.want)
		}
	}

	// A deposit reaches Recording, where the lease the printout shows
	// takes it, with a fetch_url on the recorder's server of versions.
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := v1.NewBatchServiceClient(conn).Submit(ctx, &v1.SubmitRequest{Submitter: "me", Profile: "demo",
		PayloadUrl: depositorURL[1] + "/batch.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS}); err != nil {
		t.Fatal(err)
	}
	rconn, err := grpc.NewClient(recorder[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close()
	var lease *v1.LeaseResponse
	for lease.GetLeaseId() == "" {
		if lease, err = v1.NewRecordingServiceClient(rconn).Lease(authed, &v1.LeaseRequest{Wait: durationpb.New(30 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(lease.GetFetchUrl(), versions[1]) {
		t.Errorf("the lease's fetch_url %q is not on the recorder's server of versions %s", lease.GetFetchUrl(), versions[1])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, lease.GetFetchUrl(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	got, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	manifest, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if got.StatusCode != http.StatusOK || !strings.HasPrefix(string(manifest), "#%checkm") {
		t.Errorf("GET fetch_url: %s %.80q, want the version's manifest", got.Status, manifest)
	}
	if _, err := v1.NewRecordingServiceClient(rconn).Complete(authed, &v1.CompleteRequest{LeaseId: lease.GetLeaseId()}); err != nil {
		t.Errorf("completing the lease: %v", err)
	}

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(console[1]+"signin", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("console sign-in with the caller's token: %s, want 303", resp.Status)
	}
}

// TestTheDemoRunsOnTheS3Store runs what `make demo STORE=s3` runs: the
// sample deposit goes through the whole stack storing into a bucket of the
// versitygw server the run starts, and the three good objects are there.
func TestTheDemoRunsOnTheS3Store(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	repo := filepath.Join("..", "..", "..")
	bin := filepath.Join(dir, "bin")
	if err := stack.Build(ctx, repo, bin); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(ctx, &out, nil, bin, filepath.Join(repo, "examples"), filepath.Join(dir, "run"), false, "s3"); err != nil {
		t.Fatalf("make demo STORE=s3: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"S3 store: versitygw at http://127.0.0.1:", "status-report: 3 successful, 1 failed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printout lacks %q", want)
		}
	}
	stored := regexp.MustCompile(`stored objects +(\S+) \((\d+) objects\)`).FindStringSubmatch(out.String())
	if stored == nil || stored[2] != "3" || !strings.HasSuffix(stored[1], filepath.Join("s3", "ingestq")) {
		t.Fatalf("stored objects: %v, want 3 in the bucket's folder s3/ingestq", stored)
	}
	manifests, _ := filepath.Glob(filepath.Join(stored[1], "*", "v1", "manifest.checkm"))
	if len(manifests) != 3 {
		t.Errorf("%d version manifests in the bucket, want 3: %v", len(manifests), manifests)
	}
}

// TestTheDemoRunsOnMerrittsStorageService runs what `make demo
// STORE=merritt` runs: the sample deposit goes through the whole stack
// storing into a node of the stand-in for Merritt's storage service the run
// starts, the three good objects end Completed, stored there, and the
// inventory records the versions the service's manifests list.
func TestTheDemoRunsOnMerrittsStorageService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	repo := filepath.Join("..", "..", "..")
	bin := filepath.Join(dir, "bin")
	if err := stack.Build(ctx, repo, bin); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(ctx, &out, nil, bin, filepath.Join(repo, "examples"), filepath.Join(dir, "run"), false, "merritt"); err != nil {
		t.Fatalf("make demo STORE=merritt: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"Merritt store: node 9501 of a stand-in for Merritt's storage service at http://127.0.0.1:",
		"status-report: 3 successful, 1 failed", "(3 objects)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printout lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^  jid\d+  Completed `).FindAllString(out.String(), -1)); n != 3 {
		t.Errorf("%d jobs Completed, want 3", n)
	}
	dbs, _ := filepath.Glob(filepath.Join(dir, "run", "*", "inventory.db"))
	if len(dbs) != 1 {
		t.Fatalf("inventories %v", dbs)
	}
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: dbs[0], RawQuery: "mode=ro"}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT ark, number, manifest_url FROM versions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var ark, manifest string
		var number int
		if err := rows.Scan(&ark, &number, &manifest); err != nil {
			t.Fatal(err)
		}
		n++
		if got, err := merrittstore.ObjectFromManifestURL(manifest); err != nil || got != ark || number != 1 || !strings.Contains(manifest, "/manifest/9501/") {
			t.Errorf("version %d of %s recorded from %s (its object %q, %v)", number, ark, manifest, got, err)
		}
	}
	if n != 3 {
		t.Errorf("%d versions recorded, want 3", n)
	}
}

func TestAStoreOtherThanLocalS3OrMerrittIsRefused(t *testing.T) {
	err := run(context.Background(), io.Discard, nil, "bin", "examples", t.TempDir(), false, "nfs")
	if err == nil || !strings.Contains(err.Error(), "want local, s3 or merritt") {
		t.Errorf("-store nfs: %v", err)
	}
}
