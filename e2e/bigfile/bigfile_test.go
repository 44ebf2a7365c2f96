package bigfile

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"testing"
)

func TestAFileIsServedWholeOrFromAByteAndCountedAndCut(t *testing.T) {
	s, err := Start("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := File{Size: 3<<20 + 11, Seed: 9}
	s.Put("/f", f)
	resp, err := http.Get(s.URL + "/f")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, _ := io.Copy(h, resp.Body)
	resp.Body.Close()
	if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256() || resp.Header.Get("ETag") != f.ETag() {
		t.Fatalf("whole: %d bytes, digest %x", n, h.Sum(nil))
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/f", nil)
	req.Header.Set("Range", "bytes=2097152-")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	whole, _ := io.ReadAll(f.Reader())
	if resp.StatusCode != http.StatusPartialContent || string(rest) != string(whole[2<<20:]) {
		t.Fatalf("range: HTTP %d, %d bytes", resp.StatusCode, len(rest))
	}
	s.CutOnce("/f", 1000)
	resp, err = http.Get(s.URL + "/f")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(got) != 1000 {
		t.Fatalf("cut: %d bytes, %v; want 1000 and an error", len(got), err)
	}
	answers := s.Answers()
	if len(answers) != 3 || answers[1].Range != "bytes=2097152-" || answers[1].Sent != f.Size-2<<20 || answers[2].Sent != 1000 ||
		s.Sent() != f.Size+f.Size-2<<20+1000 {
		t.Errorf("answers %+v, sent %d", answers, s.Sent())
	}
}
