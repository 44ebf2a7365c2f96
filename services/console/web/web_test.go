package web

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The console's behaviour against the batcher is tested in e2e/console;
// these are the parts that need none.

// TestASignInCookieHoldsOnlyUnchangedBeforeItsExpiryAndUnderItsKey: a
// cookie names its sign-in until its expiry; one of another key (another
// console without the shared key), one past its expiry, one whose expiry,
// id or MAC was changed, names none.
func TestASignInCookieHoldsOnlyUnchangedBeforeItsExpiryAndUnderItsKey(t *testing.T) {
	a, err := newAuth("the-token", []byte(strings.Repeat("k", MinSignInKeyBytes)), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newAuth("the-token", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherToken, err := newAuth("another-token", []byte(strings.Repeat("k", MinSignInKeyBytes)), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const id = "Jb3xq0lQeTn2H8Zr5yWcA1kVdU6sPgMf"
	now := time.Now()
	valid := a.cookie(id, now.Add(time.Hour))
	if got, ok := a.signInID(valid, now); !ok || got != id {
		t.Fatalf("a fresh cookie names %q, %t; want %s", got, ok, id)
	}
	exp, rest, _ := strings.Cut(valid, ".")
	mac := rest[strings.LastIndex(rest, ".")+1:]
	for name, value := range map[string]string{
		"another console's":    other.cookie(id, now.Add(time.Hour)),
		"another token's":      otherToken.cookie(id, now.Add(time.Hour)),
		"expired":              a.cookie(id, now.Add(-time.Second)),
		"tampered expiry":      "9" + valid,
		"no mac":               exp + "." + id,
		"another id":           exp + ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA." + mac,
		"empty":                "",
		"not a cookie of ours": "x.y.z",
	} {
		if got, ok := a.signInID(value, now); ok {
			t.Errorf("%s cookie names sign-in %q", name, got)
		}
	}
}

func TestSignInReturnsOnlyToThisConsole(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/jobs?state=Failed", "/jobs?state=Failed"},
		{"/", "/"},
		{"", "/"},
		{"https://example.org/", "/"},
		{"//example.org/x", "/"},
		{"/\\example.org", "/"},
		{"javascript:alert(1)", "/"},
		{"jobs", "/"},
		{"/x\r\nSet-Cookie: a=b", "/"},
	}
	for _, tt := range tests {
		if got := safeReturn(tt.in, "/"); got != tt.want {
			t.Errorf("safeReturn(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAdminRefusalsBecomeHTTPStatuses(t *testing.T) {
	tests := []struct {
		code codes.Code
		http int
	}{
		{codes.InvalidArgument, http.StatusBadRequest},
		{codes.NotFound, http.StatusNotFound},
		{codes.FailedPrecondition, http.StatusConflict},
		{codes.Aborted, http.StatusConflict},
		{codes.AlreadyExists, http.StatusConflict},
		{codes.Unauthenticated, http.StatusUnauthorized},
		{codes.PermissionDenied, http.StatusForbidden},
		{codes.ResourceExhausted, http.StatusTooManyRequests},
		{codes.Unavailable, http.StatusServiceUnavailable},
		{codes.DeadlineExceeded, http.StatusGatewayTimeout},
		{codes.Internal, http.StatusInternalServerError},
		{codes.Unknown, http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			got := refusalOf(status.Error(tt.code, "batch bid0000000001 is Processing"))
			if got.HTTP != tt.http || got.Code != tt.code.String() || got.Message != "batch bid0000000001 is Processing" {
				t.Errorf("got %+v, want HTTP %d", got, tt.http)
			}
		})
	}
	// An error that is no status (none should reach the console) is a 500
	// that still says what happened.
	if got := refusalOf(errors.New("disk on fire")); got.HTTP != http.StatusInternalServerError || got.Message != "disk on fire" {
		t.Errorf("plain error: %+v", got)
	}
}

func TestASignInKeyFileMustHoldAKey(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		short:                         "holds 9 bytes: a session key needs at least 32",
		filepath.Join(dir, "missing"): "reading the console's session key",
	} {
		if _, err := ReadSignInKey(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadSignInKey(%s): %v, want an error saying %q", filepath.Base(path), err, want)
		}
	}
	spaced := filepath.Join(dir, "spaced")
	if err := os.WriteFile(spaced, []byte("  "+strings.Repeat("s", 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if key, err := ReadSignInKey(spaced); err != nil || string(key) != strings.Repeat("s", 48) {
		t.Errorf("ReadSignInKey of a key with white space around: %q, %v", key, err)
	}
}

// TestPagesHaveNoInlineScriptOrStyle reads every page template: the CSP
// would block inline script, event handlers and style attributes, so the
// console must not rely on any.
func TestPagesHaveNoInlineScriptOrStyle(t *testing.T) {
	entries, err := templateFiles.ReadDir("templates")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := templateFiles.ReadFile("templates/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ToLower(string(data))
		for _, bad := range []string{"<script>", " style=", "<style", " onclick=", " onsubmit=", " onload=", "javascript:"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", e.Name(), bad)
			}
		}
		if n, m := strings.Count(text, "<script"), strings.Count(text, `<script src="/static/`); n != m {
			t.Errorf("%s: %d script tags, %d of them load a static file", e.Name(), n, m)
		}
	}
}

// TestNamesAreTheQueuesSpellingOfTheEnums: every job and batch state and
// payload type is shown as the queue writes it, and read back from that,
// from lower case and from the enum's own name.
func TestNamesAreTheQueuesSpellingOfTheEnums(t *testing.T) {
	var jobs []string
	for _, s := range jobStates() {
		jobs = append(jobs, jobStateName(s))
		for _, typed := range []string{jobStateName(s), strings.ToLower(jobStateName(s)), s.String()} {
			if got, err := parseJobState(typed); err != nil || got != s {
				t.Errorf("parseJobState(%q) = %v, %v", typed, got, err)
			}
		}
	}
	if got := strings.Join(jobs, " "); got != "Pending Held Estimating Provisioning Downloading Processing Storing Recording Notify Completed Failed Deleted" {
		t.Errorf("job states %s", got)
	}
	var batches []string
	for _, s := range batchStates() {
		batches = append(batches, batchStateName(s))
	}
	if got := strings.Join(batches, " "); got != "Pending Held Processing Reporting UpdateReporting Completed Failed Deleted" {
		t.Errorf("batch states %s", got)
	}
	for _, typed := range []string{"UpdateReporting", "update-reporting", "BATCH_STATE_UPDATE_REPORTING"} {
		if got, err := parseBatchState(typed); err != nil || got != v1.BatchState_BATCH_STATE_UPDATE_REPORTING {
			t.Errorf("parseBatchState(%q) = %v, %v", typed, got, err)
		}
	}
	if _, err := parseJobState("Bogus"); err == nil || err.Error() != `unknown job state "Bogus"` {
		t.Errorf("parseJobState(Bogus): %v", err)
	}
	if got := payloadTypeName(v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS); got != "manifest_of_manifests" {
		t.Errorf("payload type %q", got)
	}
}

// TestACompletedJobsPageDoesNotPointAtItsRemovedWorkingFolder: the store
// node's manifest lies in the job's working folder; while the job is on its
// way the page shows its URL, once the job completed (the folder removed)
// it says where the manifest went instead. A manifest elsewhere stays.
func TestACompletedJobsPageDoesNotPointAtItsRemovedWorkingFolder(t *testing.T) {
	job := func(state v1.JobState, url string) *v1.Job {
		return &v1.Job{Status: &v1.JobStatus{Status: state},
			Configuration: &v1.JobConfiguration{WorkingDir: "/var/lib/ingestq/work/jid0000000001"},
			Store:         &v1.Store{Mode: "add", ManifestUrl: url}}
	}
	inWork := "file:///var/lib/ingestq/work/jid0000000001/producer/manifest.checkm"
	if got := storeRef(job(v1.JobState_JOB_STATE_RECORDING, inWork)); got.URL != inWork || got.Summary != "add" {
		t.Errorf("recording: %+v, want the working folder's URL", got)
	}
	got := storeRef(job(v1.JobState_JOB_STATE_COMPLETED, inWork))
	if got.URL != "" || !strings.Contains(got.Summary, "removed when the job completed") {
		t.Errorf("completed: %+v, want no URL and why", got)
	}
	elsewhere := "https://store.example/manifest/ark:/99999/fk4c"
	if got := storeRef(job(v1.JobState_JOB_STATE_COMPLETED, elsewhere)); got.URL != elsewhere {
		t.Errorf("completed, manifest elsewhere: %+v, want its URL", got)
	}
	// A folder whose name begins as the working folder's is not in it.
	sibling := "file:///var/lib/ingestq/work/jid00000000012/manifest.checkm"
	if got := storeRef(job(v1.JobState_JOB_STATE_COMPLETED, sibling)); got.URL != sibling {
		t.Errorf("completed, manifest in a sibling folder: %+v, want its URL", got)
	}
}
