package store

import (
	"context"

	// Named apart: the package's tests have a helper called stage.
	stagemeter "github.com/ingestq/ingestq/shared/stage"

	"github.com/ingestq/ingestq/shared/checkm"
)

// The storing step's progress, shown to operators: the bytes of a
// version's files read as they are stored, of those its manifest lists.

// meter is the meter of the job step ctx belongs to (nil: none).
func meter(ctx context.Context) *stagemeter.Meter { return stagemeter.MeterOf(ctx) }

// expectBytes tells the step's meter how many bytes the version's files
// hold.
func expectBytes(ctx context.Context, entries []checkm.Entry) {
	var total int64
	for _, e := range entries {
		total += max(e.FileSize, 0)
	}
	meter(ctx).Expect(total)
}
