package store

import (
	"context"
	"strings"
	"testing"

	stagemeter "github.com/ingestq/ingestq/shared/stage"

	"github.com/ingestq/ingestq/shared/s3test"
)

// TestStoringAVersionTellsTheStepsMeterItsBytes: on the local store and
// on S3 (a file big enough to go up in parts, and a small one), the
// storing step's meter expects the version's bytes and counts them all.
func TestStoringAVersionTellsTheStepsMeterItsBytes(t *testing.T) {
	files := map[string]string{"producer/big.bin": strings.Repeat("x", 6<<20+3), "producer/small.txt": "small"}
	total := int64(6<<20 + 3 + 5)
	for name, s := range map[string]Storage{
		"local": Local{Root: t.TempDir()},
		"s3":    s3Store(t, s3test.Start(t), ""),
	} {
		t.Run(name, func(t *testing.T) {
			m := stagemeter.NewMeter("storing", nil)
			ctx := stagemeter.WithMeter(context.Background(), m)
			if _, err := s.Store(ctx, Request{ARK: "ark:/99999/fk4meter", JobID: "jid0000000001", Mode: "add", ManifestURL: stage(t, files)}); err != nil {
				t.Fatal(err)
			}
			if m.Done() != total {
				t.Errorf("the meter counted %d bytes of %d", m.Done(), total)
			}
		})
	}
}
