package mint

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzANVL writes the body of an EZID mint request from a depositor's
// metadata: one line per value given, whatever the value holds (line
// breaks, '%', ':'), each line reading back, percent-decoded, as the name
// and value written. The seed corpus is testdata/fuzz/FuzzANVL.
func FuzzANVL(f *testing.F) {
	f.Fuzz(func(t *testing.T, who, what, when string) {
		pairs := [][2]string{{"_profile", "erc"}, {"erc.who", who}, {"erc.what", what}, {"erc.when", when}}
		var want [][2]string
		for _, p := range pairs {
			if p[1] != "" {
				want = append(want, p)
			}
		}
		body := ANVL(pairs)
		if !strings.HasSuffix(body, "\n") {
			t.Fatalf("body %q does not end its last line", body)
		}
		var got [][2]string
		for line := range strings.SplitSeq(strings.TrimSuffix(body, "\n"), "\n") {
			name, value, ok := strings.Cut(line, ": ")
			if !ok {
				t.Fatalf("line %q is not name: value", line)
			}
			n, err := url.PathUnescape(name)
			if err != nil {
				t.Fatalf("name %q: %v", name, err)
			}
			v, err := url.PathUnescape(value)
			if err != nil {
				t.Fatalf("value %q: %v", value, err)
			}
			got = append(got, [2]string{n, v})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ANVL %q reads back as %q, want %q", body, got, want)
		}
	})
}
