package store

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
)

// A store that answers that more unfinished uploads follow, but not from
// where, would have them listed from the start for ever: aborting them is
// an error instead.
func TestUnfinishedUploadsListedForEverAreAnError(t *testing.T) {
	var lists atomic.Int64
	url := s3test.StandIn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete { // AbortMultipartUpload
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if lists.Add(1) > 100 {
			// A listing that gets this far would never end: refused, so
			// that the test ends (failing).
			http.Error(w, "listed for ever", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket><IsTruncated>true</IsTruncated>`+
			`<Upload><Key>ark/v1/f</Key><UploadId>u1</UploadId></Upload></ListMultipartUploadsResult>`)
	}))
	c := s3test.StandInClient(t, url, nil)
	got := make(chan error, 1)
	go func() { got <- S3{Client: c, Bucket: "b"}.abortUploads(t.Context(), "ark/", "") }()
	select {
	case err := <-got:
		if !errors.Is(err, s3store.ErrListingLoops) {
			t.Fatalf("abortUploads = %v; want ErrListingLoops", err)
		}
		t.Logf("after %d listings: %v", lists.Load(), err)
	case <-time.After(time.Minute):
		t.Fatalf("still listing after a minute (%d listings)", lists.Load())
	}
}
