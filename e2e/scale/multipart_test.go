package scale

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ingestq/ingestq/e2e/bench"
	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// slowStore sits between the services and the S3 server: it passes every
// request on, reading the body of each part sent at a bounded rate (so a
// multipart upload lasts long enough to be cut in the middle), and notes
// which parts were sent.
type slowStore struct {
	proxy *httputil.ReverseProxy
	rate  int // bytes per second of a part's body
	mu    sync.Mutex
	parts []string // part numbers of the UploadPart requests, in order
}

func (s *slowStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if n := r.URL.Query().Get("partNumber"); r.Method == http.MethodPut && n != "" {
		s.mu.Lock()
		s.parts = append(s.parts, n)
		s.mu.Unlock()
		r.Body = &slowBody{r: r.Body, rate: s.rate}
	}
	s.proxy.ServeHTTP(w, r)
}

func (s *slowStore) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.parts)
}

type slowBody struct {
	r    io.ReadCloser
	rate int
}

func (b *slowBody) Read(p []byte) (int, error) {
	p = p[:min(len(p), 64<<10)]
	n, err := b.r.Read(p)
	time.Sleep(time.Duration(n) * time.Second / time.Duration(b.rate)) // a slow body: its slowness is the point
	return n, err
}

func (b *slowBody) Close() error { return b.r.Close() }

// TestAProcessorKilledMidMultipartUploadResumesItAndCleanupAbortsOrphans:
// a file of 96 MiB goes to S3 in a multipart upload of 12 parts; the
// processor is killed (SIGKILL) once the store holds some of them. The
// processor started again takes the job in Storing, finds the upload
// (ListParts), sends only the parts it lacks, and completes it: the file
// stored is the deposit's, and no unfinished upload is left. An upload
// nothing comes back for (begun by hand, its object not being stored) is
// aborted by the batcher's cleanup once it is older than
// INGESTQ_S3_STALE_UPLOAD_AGE.
func TestAProcessorKilledMidMultipartUploadResumesItAndCleanupAbortsOrphans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	deposits := filepath.Join(dir, "deposits")
	if err := os.MkdirAll(deposits, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 96 << 20
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i*31 + i/8191)
	}
	if err := os.WriteFile(filepath.Join(deposits, "big.bin"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	dep, err := depositor.Start(deposits)
	if err != nil {
		t.Fatal(err)
	}
	defer dep.Close()

	srv, stopS3, err := s3test.Run(ctx, filepath.Join(dir, "s3"), filepath.Join(dir, "s3.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stopS3()
	const bucket = "ingestq"
	if err := srv.MakeBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowStore{proxy: httputil.NewSingleHostReverseProxy(target), rate: 24 << 20}
	front := httptest.NewServer(slow)
	defer front.Close()
	direct, err := s3store.Client(ctx, srv.Settings(bucket))
	if err != nil {
		t.Fatal(err)
	}

	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, "bench.yaml"),
		[]byte("name: bench\ncollection: bench\nnotification_addresses: [bench@example.org]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(ctx, stack.Options{Dir: dir, BinDir: binDir, ProfilesDir: profiles, Env: map[string]string{
		"INGESTQ_STORE": "s3", "INGESTQ_S3_ENDPOINT": front.URL, "INGESTQ_S3_BUCKET": bucket,
		"INGESTQ_S3_REGION": srv.Region, "INGESTQ_S3_PATH_STYLE": "true",
		"AWS_ACCESS_KEY_ID": srv.Access, "AWS_SECRET_ACCESS_KEY": srv.Secret,
		"INGESTQ_S3_STALE_UPLOAD_AGE": "2s", "INGESTQ_CLEANUP_INTERVAL": "1s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.WithoutCancel(ctx))
	conn, err := grpc.NewClient(s.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	batches := v1.NewBatchServiceClient(conn)
	c, err := bench.Connect(ctx, s.Servers, s.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	sub, err := batches.Submit(ctx, &v1.SubmitRequest{Submitter: "scale", Profile: "bench",
		PayloadUrl: dep.URL + "/big.bin", PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE})
	if err != nil {
		t.Fatal(err)
	}
	// Kill the processor once the store holds three parts.
	var key, upload string
	var held []string
	deadline, _ := ctx.Deadline()
	waittest.Until(t, time.Until(deadline), func() error {
		for u, err := range s3store.ListUploads(ctx, direct, bucket, "") {
			if err != nil {
				t.Fatal(err)
			}
			key, upload = aws.ToString(u.Key), aws.ToString(u.UploadId)
		}
		if upload != "" {
			parts, err := direct.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(upload)})
			if err != nil {
				t.Fatal(err)
			}
			held = held[:0]
			for _, p := range parts.Parts {
				held = append(held, strconv.Itoa(int(aws.ToInt32(p.PartNumber))))
			}
		}
		if len(held) < 3 {
			return fmt.Errorf("no upload with three parts came (parts sent %v)", slow.sent())
		}
		return nil
	})
	proc := s.Procs("processor")[0]
	proc.Kill()
	before := len(slow.sent())
	t.Logf("processor killed with parts %v of %s in the store, %d part requests sent", held, key, before)
	if err := proc.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	jid, err := bench.WaitBatchJob(ctx, batches, c, sub.GetBatchId(), s.LogDir)
	if err != nil {
		t.Fatal(err)
	}
	after := slow.sent()[before:]
	t.Logf("parts sent after the restart: %v", after)
	for _, n := range held {
		if slices.Contains(after, n) {
			t.Errorf("part %s, in the store before the kill, was sent again (sent after: %v)", n, after)
		}
	}
	if len(after) == 0 || len(after) > 12-len(held) {
		t.Errorf("%d parts sent after the restart; want the %d the store lacked at most", len(after), 12-len(held))
	}

	data, _, err := c.Nodes().Get(ctx, c.Paths().Job(jid).Node(queue.NodeInventory))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := queue.DecodeInventory("inventory", data)
	if err != nil {
		t.Fatal(err)
	}
	r := fixity.Reader{S3: direct}
	m, err := r.Manifest(ctx, inv.GetManifestUrl())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range m.Entries {
		if e.FileName == "producer/big.bin" {
			found = e.HashValue == hex.EncodeToString(sum[:]) && e.FileSize == size
		}
	}
	if rep, err := r.Verify(ctx, inv.GetManifestUrl()); !found || err != nil || len(rep.Mismatches) > 0 {
		t.Errorf("stored version: big.bin listed with the deposit's digest %v; read back %+v, %v", found, rep, err)
	}
	if left := unfinished(t, ctx, direct, bucket); len(left) != 0 {
		t.Errorf("unfinished uploads left: %v", left)
	}

	// An orphan: begun, then nothing came back for it.
	if _, err := direct.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket),
		Key: aws.String("ark_99999_orphan/v1/producer/big.bin")}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, time.Minute, func() error {
		if left := unfinished(t, ctx, direct, bucket); len(left) > 0 {
			return fmt.Errorf("the orphaned upload is still there a minute on: %v", left)
		}
		return nil
	})
}

func unfinished(t *testing.T, ctx context.Context, c *s3.Client, bucket string) []string {
	t.Helper()
	var out []string
	for u, err := range s3store.ListUploads(ctx, c, bucket, "") {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s (%s)", aws.ToString(u.Key), aws.ToString(u.UploadId)))
	}
	return out
}
