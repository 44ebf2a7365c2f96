package spawn

import (
	"testing"
)

func TestFileNameOfASingleFilePayloadIsTheBaseNameOfItsPath(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"https://example.org/deposits/object.zip", "object.zip"},
		{"https://example.org/deposits/report%20final.pdf?download=1#top", "report final.pdf"},
		{"http://127.0.0.1:8080/a/b/c.tar.gz/", "c.tar.gz"},
		{"https://example.org/", ""},
		{"https://example.org", ""},
		{"https://example.org/..", ""},
		{"https://example.org/a/%2e%2e", ""},
		{"https://example.org/nul%00name", ""},
		// A '|' is a name's; "%7c" is how a manifest spells one, which the
		// name cannot hold.
		{"https://example.org/a%7Cb.txt", "a|b.txt"},
		{"https://example.org/x%257cy.txt", ""},
		{"https://example.org/x%257Cy.txt", "x%7Cy.txt"},
	} {
		got, err := fileNameOf(tc.url)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("fileNameOf(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}
