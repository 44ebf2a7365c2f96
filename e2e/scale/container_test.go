package scale

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/bench"
	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/containertest"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/queue"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestContainersWhoseSizesAreInZip64AndPaxRecordsAreStored: a zip whose
// sizes and offsets are all in zip64 records (as a zip past 4 GiB has them)
// and a tar.gz whose sizes are all in pax headers (as a file past 8 GiB has
// it) go through every stage as containers and are stored file for file.
// `make bench` sends the real ones through: a zip of 4.5 GiB, a tar.gz
// holding a file of 8.5 GiB.
func TestContainersWhoseSizesAreInZip64AndPaxRecordsAreStored(t *testing.T) {
	files := map[string]string{"data/a.txt": "sized by zip64 and pax records", "data/sub/b.txt": "and so is this one"}
	names := []string{"data/a.txt", "data/sub/b.txt"}
	dir := t.TempDir()
	deposits := filepath.Join(dir, "deposits")
	if err := os.MkdirAll(deposits, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deposits, "zip64.zip"), containertest.ForcedZip64(files, names), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteGzip(filepath.Join(deposits, "pax.tar.gz"), containertest.PaxSizedTar(files, names)); err != nil {
		t.Fatal(err)
	}
	dep, err := depositor.Start(deposits)
	if err != nil {
		t.Fatal(err)
	}
	defer dep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, "bench.yaml"),
		[]byte("name: bench\ncollection: bench\nnotification_addresses: [bench@example.org]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(ctx, stack.Options{Dir: dir, BinDir: binDir, ProfilesDir: profiles})
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

	for _, name := range []string{"zip64.zip", "pax.tar.gz"} {
		t.Run(name, func(t *testing.T) {
			sub, err := batches.Submit(ctx, &v1.SubmitRequest{Submitter: "scale", Profile: "bench",
				PayloadUrl: dep.URL + "/" + name, PayloadType: v1.PayloadType_PAYLOAD_TYPE_CONTAINER})
			if err != nil {
				t.Fatal(err)
			}
			jid, err := bench.WaitBatchJob(ctx, batches, c, sub.GetBatchId(), s.LogDir)
			if err != nil {
				t.Fatal(err)
			}
			data, _, err := c.Nodes().Get(ctx, c.Paths().Job(jid).Node(queue.NodeInventory))
			if err != nil {
				t.Fatal(err)
			}
			inv, err := queue.DecodeInventory("inventory", data)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				f, err := fixity.Reader{}.Open(ctx, versionFile(inv.GetManifestUrl(), "producer/"+n))
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 256)
				k, _ := f.Read(got)
				f.Close()
				if string(got[:k]) != files[n] {
					t.Errorf("producer/%s stored as %q, want %q", n, got[:k], files[n])
				}
			}
			rep, err := fixity.Reader{}.Verify(ctx, inv.GetManifestUrl())
			if err != nil || len(rep.Mismatches) > 0 || rep.Files < len(names) {
				t.Errorf("the stored version read back: %+v, %v", rep, err)
			}
		})
	}
}

// versionFile is the URL of a file of a version in the local store, beside
// its manifest.
func versionFile(manifestURL, name string) string {
	return manifestURL[:len(manifestURL)-len("manifest.checkm")] + name
}
