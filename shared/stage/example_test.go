package stage_test

import (
	"context"
	"fmt"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/stage/stagetest"
)

// A handler reads the claimed job and says what becomes of it; the runner
// commits that (stage.Config{Handler: size}). Its decisions are tried here
// on jobs held in memory, as a handler's own tests do.
func ExampleHandler() {
	size := func(ctx context.Context, claim stage.Job) stage.Outcome {
		m, err := claim.LoadManifest(ctx)
		if err != nil {
			return stage.Release() // for another try
		}
		if len(m.GetFiles()) == 0 {
			return stage.Fail("the manifest lists no files")
		}
		var bytes int64
		for _, f := range m.GetFiles() {
			bytes += f.GetSize()
		}
		return stage.Next(jobs.Change{SpaceNeeded: &bytes, Message: fmt.Sprintf("%d files, %d bytes", len(m.GetFiles()), bytes)})
	}

	ctx := context.Background()
	two := &v1.Job{Id: "jid0000000001", Manifest: &v1.Manifest{Files: []*v1.ManifestFile{{Size: 100}, {Size: 200}}}}
	out := size(ctx, stagetest.New(two, queue.Estimating))
	fmt.Println(out)
	fmt.Println("space_needed:", *out.Change().SpaceNeeded)
	fmt.Println(size(ctx, stagetest.New(&v1.Job{Id: "jid0000000002"}, queue.Estimating)))
	// Output:
	// next: 2 files, 300 bytes
	// space_needed: 300
	// to Failed: the manifest lists no files
}
