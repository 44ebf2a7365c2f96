package inventory

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// BenchmarkRecordSixteenAtOnce records one-file versions from 16 goroutines,
// as the built-in recorder's leases do at the default bench concurrency.
func BenchmarkRecordSixteenAtOnce(b *testing.B) {
	db, err := Open(context.Background(), filepath.Join(b.TempDir(), "inventory.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var n atomic.Int64
	b.SetParallelism(8) // 16 on two cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			v := version(fmt.Sprintf("ark:/99999/fk4b%d", i), fmt.Sprintf("jid%010d", i), 0,
				File{Name: "producer/a.txt", Size: 1024, DigestAlg: "sha256", Digest: "aa"})
			if _, err := db.Record(context.Background(), v); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
