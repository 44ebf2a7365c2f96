package queue

import (
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// benchStatus is the status node of a job that went through every state
// (nine history entries), as a claim of its last step reads it.
func benchStatus() []byte {
	now := time.Date(2026, 11, 27, 2, 6, 47, 509e6, time.UTC)
	st := &v1.JobStatus{Status: Pending, LastModified: NowStamp()}
	RecordChange(nil, st, "stage-w1", now)
	for _, to := range []JobState{Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify} {
		now = now.Add(11 * time.Millisecond)
		next := &v1.JobStatus{Status: to, LastModified: NowStamp(), LastSuccessfulStatus: st.GetStatus(), Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		RecordChange(st, next, "stage-w1", now)
		st = next
	}
	return EncodeJobStatus(st)
}

// BenchmarkStatusStep is what one step costs a stage's client in encoding:
// the status decoded with the claim, the commit's status built and encoded
// with the keys of other writers carried forward.
func BenchmarkStatusStep(b *testing.B) {
	data := benchStatus()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		old, err := DecodeJobStatus("", data)
		if err != nil {
			b.Fatal(err)
		}
		next := &v1.JobStatus{Status: Completed, LastModified: NowStamp(), LastSuccessfulStatus: Notify, Traceparent: old.GetTraceparent()}
		RecordChange(old, next, "stage-w1", time.Now())
		if out := withKeysOf(data, encodeJobStatusReusing(next, keptEntries(data, old, next)), jobStatusKeys); len(out) == 0 {
			b.Fatal("empty")
		}
	}
}
