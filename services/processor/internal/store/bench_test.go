package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkStoreSmallVersion stores versions of one 1 KB producer file and
// two system files, 16 at once (the processor's default concurrency): the
// processor's file system cost per job.
func BenchmarkStoreSmallVersion(b *testing.B) {
	files := map[string]string{"producer/file.txt": string(make([]byte, 1024)),
		"system/mrt-erc.txt": "erc:\nwho: x\n", "system/mrt-dc.xml": "<dc/>\n"}
	manifests := make([]string, 64)
	for i := range manifests {
		manifests[i] = stage(b, files)
	}
	s := Local{Root: b.TempDir()}
	var n atomic.Int64
	b.SetParallelism(8) // 16 on two cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, err := s.Store(context.Background(), Request{ARK: fmt.Sprintf("ark:/99999/b%d", i), JobID: fmt.Sprintf("jid%010d", i),
				Mode: "add", ManifestURL: manifests[i%int64(len(manifests))]})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
