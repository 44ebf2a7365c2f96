package profile_test

import (
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/ingestq/ingestq/shared/profile"
)

// FuzzLoad decodes one profile file: Parse never panics, and every profile
// it accepts keeps the rules, checked here independently of the package.
// The seed corpus is testdata/fuzz/FuzzLoad.
func FuzzLoad(f *testing.F) {
	mnemonic := regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := profile.Parse("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if !mnemonic.MatchString(p.Name) || !mnemonic.MatchString(p.Collection) {
			t.Fatalf("accepted name %q, collection %q", p.Name, p.Collection)
		}
		for _, v := range []string{p.Owner, p.StorageTarget} {
			if v == "" || strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
				t.Fatalf("accepted owner/storage target %q", v)
			}
		}
		if p.Priority < 0 || p.Priority > 99 {
			t.Fatalf("accepted priority %d", p.Priority)
		}
		for _, a := range p.NotificationAddresses {
			if _, err := mail.ParseAddress(a); err != nil || strings.ContainsAny(a, "\r\n") {
				t.Fatalf("accepted address %q (%v)", a, err)
			}
		}
		if p.CallbackURL != "" {
			u, err := url.Parse(p.CallbackURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				t.Fatalf("accepted callback_url %q", p.CallbackURL)
			}
		}
	})
}
