package checkm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
)

// manifestOf returns a manifest of n entries named 0 … n-1.
func manifestOf(n int) string {
	var b strings.Builder
	b.WriteString("#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n")
	for i := range n {
		fmt.Fprintf(&b, "http://127.0.0.1/f/%d | | | %d | | %d\n", i, i, i)
	}
	return b.String()
}

// Entries gather in chunks that grow as a manifest does; whatever the size,
// they come out whole and in the manifest's order.
func TestEntriesKeepTheirOrderAcrossChunkBoundaries(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 24, 25, 4095, 4096, 8191, 8192, 8193, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m, err := checkm.Parse(strings.NewReader(manifestOf(n)), checkm.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Entries) != n {
				t.Fatalf("%d entries, want %d", len(m.Entries), n)
			}
			for i, e := range m.Entries {
				if e.FileName != fmt.Sprint(i) || e.FileSize != int64(i) || e.Line != 3+i {
					t.Fatalf("entry %d = %+v", i, e)
				}
			}
		})
	}
}

// BenchmarkParseOneFileManifest is what most stage steps parse: an object of
// one file. B/op is what each parse allocates.
func BenchmarkParseOneFileManifest(b *testing.B) {
	text := manifestOf(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkm.Parse(strings.NewReader(text), checkm.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
