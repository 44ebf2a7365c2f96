package depositor

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServesTheDemoDepositWithItsOwnAddressInManifests(t *testing.T) {
	s, err := Start("../../examples/demo")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, body := get(t, s.URL+"/batch.checkm")
	if code != 200 || !strings.Contains(body, s.URL+"/letters-1921.checkm") || strings.Contains(body, "{{base}}") {
		t.Fatalf("batch manifest: %d %q", code, body)
	}
	if code, body := get(t, s.URL+"/objects/diary-1944/1944-06-07.txt"); code != 200 || body != "June 7. No lettres today.\n" {
		t.Fatalf("file: %d %q", code, body)
	}
	s.Set("/objects/diary-1944/1944-06-07.txt", []byte("June 7. No letters today.\n"))
	if _, body := get(t, s.URL+"/objects/diary-1944/1944-06-07.txt"); body != "June 7. No letters today.\n" {
		t.Errorf("override not served: %q", body)
	}
	if code, _ := get(t, s.URL+"/../../etc/passwd"); code != 404 {
		t.Errorf("path outside the directory: %d", code)
	}
	if s.Requests() != 4 {
		t.Errorf("requests = %d", s.Requests())
	}
}

// TestSetDelayHoldsEveryAnswerBack: with a delay set, an answer comes no
// sooner than the delay (a lower bound only: a slow machine may add more).
func TestSetDelayHoldsEveryAnswerBack(t *testing.T) {
	s, err := Start("../../examples/demo")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const delay = 200 * time.Millisecond
	s.SetDelay(delay)
	start := time.Now()
	if code, _ := get(t, s.URL+"/batch.checkm"); code != 200 {
		t.Fatalf("status %d", code)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("answered after %v, before the delay of %v", took, delay)
	}
}

func TestSetCutFirstClosesAPathsFirstAnswerAfterSoManyBytesAndARangeGoesOn(t *testing.T) {
	s, err := Start("../../examples/demo")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	whole, err := os.ReadFile("../../examples/demo/README.md")
	if err != nil || len(whole) < 100 {
		t.Fatalf("the demo's README: %d bytes, %v", len(whole), err)
	}
	s.SetCutFirst(40)
	resp, err := http.Get(s.URL + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	first, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(first) != 40 {
		t.Fatalf("the cut answer: %d bytes, %v; want 40 and an error", len(first), err)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/README.md", nil)
	req.Header.Set("Range", "bytes=40-")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	next, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusPartialContent || string(next) != string(whole[40:]) {
		t.Errorf("the next range: HTTP %d, %q, %v", resp.StatusCode, next, err)
	}
	// The path's later answers are whole.
	if code, again := get(t, s.URL+"/README.md"); code != http.StatusOK || again != string(whole) {
		t.Errorf("a later answer: HTTP %d, %d bytes", code, len(again))
	}
}

func TestCallbacksAreKeptAsReceivedWithTheirKeys(t *testing.T) {
	s, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, key := range []string{"jid0000000001", "jid0000000001", ""} {
		req, err := http.NewRequest(http.MethodPost, s.URL+CallbackPath, strings.NewReader(`{"jid":"jid0000000001"}`))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST %s: %d", CallbackPath, resp.StatusCode)
		}
	}
	got := s.Callbacks()
	if len(got) != 3 || got[0].Key != "jid0000000001" || got[1].Key != "jid0000000001" || got[2].Key != "" ||
		string(got[0].Body) != `{"jid":"jid0000000001"}` {
		t.Errorf("callbacks kept: %+v", got)
	}
}
