package badinput

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"google.golang.org/grpc/codes"
)

// metadataURL is the cloud metadata service every deny list holds.
const metadataURL = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"

// submitRefused submits a payload URL that must be refused at once with
// InvalidArgument saying want (see refuseSubmission).
func (p *pipeline) submitRefused(t *testing.T, rawURL string, want ...string) {
	t.Helper()
	p.refuseSubmission(t, &v1.SubmitRequest{Profile: demoProfile, PayloadUrl: rawURL, PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE},
		codes.InvalidArgument, want...)
}

// refuseSubmission submits req, which must be refused with code and a
// message saying want, and checks that no batch was written: the request
// goes in under a submitter of its own, whose batches are then listed.
func (p *pipeline) refuseSubmission(t *testing.T, req *v1.SubmitRequest, code codes.Code, want ...string) {
	t.Helper()
	req.Submitter = "refused-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	_, err := p.batches.Submit(context.Background(), req)
	wantStatus(t, err, code, want...)
	batches, _, err := admin.New(p.q).Batches.List(context.Background(), admin.BatchFilter{Submitter: req.Submitter})
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) > 0 {
		t.Errorf("a refused submission left batch %s", batches[0].GetId())
	}
}

// TestSubmitRefusesURLsOutsideTheFetchPolicy: a payload URL with a scheme
// other than http(s), credentials, or an address in the deny list is
// refused by Submit, naming the URL and the rule; no batch is written.
func TestSubmitRefusesURLsOutsideTheFetchPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, url string
		want      []string
	}{
		{"ftp scheme", "ftp://example.org/deposit.zip",
			[]string{`payload_url "ftp://example.org/deposit.zip": scheme "ftp" is not allowed, only http and https`}},
		{"file scheme", "file:///etc/passwd",
			[]string{`payload_url "file:///etc/passwd": scheme "file" is not allowed, only http and https`}},
		{"link-local metadata address", metadataURL,
			[]string{"payload_url: fetch: " + metadataURL + ": address denied by policy: 169.254.169.254 is in 169.254.0.0/16"}},
		{"link-local address in its IPv4-mapped IPv6 form", "http://[::ffff:169.254.169.254]/latest/",
			[]string{"address denied by policy", "169.254.0.0/16"}},
		{"IPv6 link-local address", "http://[fe80::1]/deposit.txt",
			[]string{"address denied by policy: fe80::1 is in fe80::/10"}},
		{"the unspecified address 0.0.0.0", "http://0.0.0.0:8080/deposit.txt",
			[]string{"address denied by policy: 0.0.0.0 is in 0.0.0.0/8"}},
		{"credentials in the URL", "http://depositor:s3cret@example.org/deposit.txt",
			[]string{"carries credentials; they would be stored in the queue in clear", "depositor:xxxxx@example.org"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			shared.main.submitRefused(t, tc.url, tc.want...)
		})
	}
}

// TestDeniedURLsInsideManifestsFailTheirBatchNamingTheLine: URLs that
// Submit never saw, listed inside manifests, are checked against the same
// policy before any job exists (by the batcher) or before the job goes on
// (by the estimator, for the object manifests of a manifest of manifests).
func TestDeniedURLsInsideManifestsFailTheirBatchNamingTheLine(t *testing.T) {
	t.Parallel()
	serve("/good/report.txt", goodFile)
	cases := []struct {
		name string
		typ  v1.PayloadType
		body string
		want outcome
	}{
		{"object manifest listing an ftp URL", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			objectHead + "ftp://example.org/a.txt | | | | | a.txt\n",
			outcome{batch: []string{`line 4: fetch: ftp://example.org/a.txt: scheme not allowed: "ftp" (allowed: http, https)`}}},
		{"object manifest listing a file URL after a good row", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			objectHead + goodRow("report.txt") + "file:///etc/shadow | | | | | shadow\n",
			outcome{batch: []string{`line 5: fetch: file:///etc/shadow: scheme not allowed: "file"`}}},
		{"object manifest listing the metadata service", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			objectHead + metadataURL + "role | | | | | role\n",
			outcome{batch: []string{"line 4: fetch: " + metadataURL + "role: address denied by policy: 169.254.169.254 is in 169.254.0.0/16"}}},
		{"manifest of manifests listing the metadata service", v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
			batchHead + metadataURL + "object.checkm | | | | | object.checkm | | | \n",
			outcome{batch: []string{"line 4: fetch: " + metadataURL + "object.checkm: address denied by policy"}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := serve(fmt.Sprintf("/denied-%d/payload.checkm", i), tc.body)
			tc.want.batch = append(tc.want.batch, u)
			shared.main.expectFailure(t, shared.main.submit(t, u, tc.typ), tc.want)
		})
	}

	t.Run("object manifest of a manifest of manifests listing the metadata service", func(t *testing.T) {
		t.Parallel()
		object := serve("/denied-mom/object.checkm", objectHead+goodRow("report.txt")+metadataURL+" | | | | | creds\n")
		u := serve("/denied-mom/batch.checkm", batchHead+object+" | | | | | object.checkm | | | \n")
		shared.main.expectFailure(t, shared.main.submit(t, u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS),
			outcome{failed: 1, job: []string{"manifest " + object + ": line 5: fetch: " + metadataURL + ": address denied by policy"}})
	})
}

// redirectTo is a hostile URL (ending in name) that redirects to target.
func redirectTo(name, target string) string {
	return shared.hostile.URL + "/redirect/" + name + "?to=" + url.QueryEscape(target)
}

// TestRedirectsOutOfThePolicyAreNotFollowed: a depositor's server that
// redirects to the metadata service or to a file: URL gets its payload
// refused, the message naming both the URL asked for and where it led.
func TestRedirectsOutOfThePolicyAreNotFollowed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		typ  v1.PayloadType
		url  string
		want func(u string) outcome
	}{
		{"file redirected to the metadata service", v1.PayloadType_PAYLOAD_TYPE_FILE, redirectTo("creds.txt", metadataURL),
			func(u string) outcome {
				return outcome{failed: 1, job: []string{"creds.txt (" + u + ")", "(redirected to " + metadataURL + "): address denied by policy: 169.254.169.254 is in 169.254.0.0/16"}}
			}},
		{"file redirected to a file URL", v1.PayloadType_PAYLOAD_TYPE_FILE, redirectTo("passwd.txt", "file:///etc/passwd"),
			func(u string) outcome {
				return outcome{failed: 1, job: []string{"passwd.txt (" + u + ")", `(redirected to file:///etc/passwd): scheme not allowed: "file"`}}
			}},
		{"object manifest redirected to the metadata service", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, redirectTo("object.checkm", metadataURL),
			func(u string) outcome {
				return outcome{batch: []string{"fetching payload " + u, "(redirected to " + metadataURL + "): address denied by policy"}}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			shared.main.expectFailure(t, shared.main.submit(t, tc.url, tc.typ), tc.want(tc.url))
		})
	}
}

// TestLoopbackDeniedUnlessAllowed runs a stack with the services' default
// address settings (the stack's own allowance of loopback taken away): an
// address literal is refused by Submit, naming the setting that would
// allow it; a host name that resolves to loopback is refused when it is
// dialled (by the batcher for a manifest, by the downloader for a file),
// and no request reaches the server behind it.
func TestLoopbackDeniedUnlessAllowed(t *testing.T) {
	p := startTestPipeline(t, "deny-loopback", pipelineOptions{env: map[string]string{"INGESTQ_FETCH_ALLOW": "", "INGESTQ_CALLBACK_ALLOW": ""}})
	port := strings.TrimPrefix(shared.hostile.URL, "http://127.0.0.1:")
	viaName := "http://localhost:" + port

	t.Run("IPv4 loopback literal refused by Submit", func(t *testing.T) {
		p.submitRefused(t, shared.hostile.URL+"/deny/deposit.txt",
			"address denied by policy: 127.0.0.1 is in 127.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)")
	})
	t.Run("IPv6 loopback literal refused by Submit", func(t *testing.T) {
		p.submitRefused(t, "http://[::1]:"+port+"/deny/deposit.txt", "address denied by policy: ::1 is in ::1/128, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=::1/128 allows it)")
	})
	t.Run("private address literal refused by Submit", func(t *testing.T) {
		p.submitRefused(t, "http://10.20.30.40/deposit.txt", "address denied by policy: 10.20.30.40 is in 10.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=10.0.0.0/8 allows it)")
	})
	t.Run("manifest on a name resolving to loopback refused by the batcher", func(t *testing.T) {
		u := viaName + "/deny/object.checkm"
		p.expectFailure(t, p.submit(t, u, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST),
			outcome{batch: []string{"fetching payload " + u, "address denied by policy", "(INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)"}})
		if n := shared.hostile.Hits("/deny/object.checkm"); n > 0 {
			t.Errorf("%d requests reached the denied server", n)
		}
	})
	t.Run("file on a name resolving to loopback refused by the downloader", func(t *testing.T) {
		u := viaName + "/deny/deposit.txt"
		p.expectFailure(t, p.submit(t, u, v1.PayloadType_PAYLOAD_TYPE_FILE),
			outcome{failed: 1, job: []string{"deposit.txt (" + u + ")", "address denied by policy", "(INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)"}})
		if n := shared.hostile.Hits("/deny/deposit.txt"); n > 0 {
			t.Errorf("%d requests reached the denied server", n)
		}
	})
}
