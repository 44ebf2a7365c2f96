package web

import (
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestATransferIsShownAsBytesDoneOfExpectedItsRateAndTimeLeft(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		p               *v1.Progress
		percent         float64
		summary, detail string
		stuck           bool
	}{
		{"moving", &v1.Progress{Phase: "downloading", BytesDone: 1_500_000_000, BytesExpected: 4_000_000_000, BytesPerSecond: 25_000_000,
			Remaining: durationpb.New(100 * time.Second), Moved: timestamppb.New(now), Restarts: 1},
			37.5, "1.5 GB of 4.0 GB (37%) at 25.0 MB/s, about 1 min left", "Downloading; started again from the first byte once", false},
		{"size not known yet", &v1.Progress{Phase: "downloading", BytesDone: 2048, BytesPerSecond: 1024, Moved: timestamppb.New(now)},
			0, "2.0 kB at 1.0 kB/s", "Downloading", false},
		{"waiting for bytes a little while", &v1.Progress{Phase: "storing", BytesDone: 10, BytesExpected: 100, Moved: timestamppb.New(now.Add(-20 * time.Second))},
			10, "10 B of 100 B (10%)", "Storing", false},
		{"no bytes for minutes", &v1.Progress{Phase: "unpacking", BytesDone: 10, BytesExpected: 100, Moved: timestamppb.New(now.Add(-6 * time.Minute)), NotMoving: true},
			10, "10 B of 100 B (10%)", "Unpacking; no bytes for 6 min", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTransfer(tc.p, now)
			if !v.Shown || v.Percent != tc.percent || v.Summary != tc.summary || v.Detail != tc.detail || v.Stuck != tc.stuck {
				t.Errorf("%+v", v)
			}
		})
	}
	if v := newTransfer(nil, now); v.Shown {
		t.Errorf("no progress shown as %+v", v)
	}
}
