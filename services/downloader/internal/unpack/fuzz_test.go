package unpack

import (
	"strings"
	"testing"
)

// FuzzExtract unpacks whatever a depositor might send as a container:
// Extract never panics, never writes outside its destination, never makes
// a link, never writes more than its byte limit, and what it reports as
// unpacked is what is on disk. The seed corpus (testdata/fuzz/FuzzExtract)
// holds small sound and hostile zips, tars and tar.gz.
func FuzzExtract(f *testing.F) {
	lim := Limits{MaxEntries: 50, MaxBytes: 64 << 10}
	f.Fuzz(func(t *testing.T, data []byte) {
		dst, st, err := extract(t, data, lim) // extract checks nothing lands beside dst
		files, total := tree(t, dst)          // tree checks no link was made
		if total > lim.MaxBytes {
			t.Fatalf("%d bytes written, over the limit of %d", total, lim.MaxBytes)
		}
		if err != nil {
			return
		}
		n := 0
		for name := range files {
			if !strings.HasSuffix(name, "/") {
				n++
			}
		}
		if n != st.Files || total != st.Bytes {
			t.Fatalf("reported %d files and %d bytes, found %d and %d", st.Files, st.Bytes, n, total)
		}
	})
}
