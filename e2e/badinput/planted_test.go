package badinput

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestMalformedJSONPlantedInAJobNodeFailsTheJobAndTheServiceLivesOn plays
// a careless peer: with the estimator paused, it requeues failed jobs to
// Pending and breaks one node of each (the status, the configuration, the
// file list) through a plain ZooKeeper session, spelling the contract's
// paths itself. Once the estimator runs again, it fails each job
// with a message naming the broken node, stays SERVING, and the next job
// goes through the whole pipeline.
func TestMalformedJSONPlantedInAJobNodeFailsTheJobAndTheServiceLivesOn(t *testing.T) {
	p := shared.main
	ctx := adminCtx(context.Background())
	cases := []struct {
		node, data string
		want       []string
	}{
		{"status", `{"status":"Pending","last_modified":"2026-11-22 03:51:07 +0000","mess`,
			[]string{"/status: unreadable: invalid JSON: unexpected end of JSON input"}},
		{"configuration", `{"profile_name":"demo","payload_url":"http://`,
			[]string{"/configuration: unreadable: invalid JSON"}},
		{"manifest", `{"files":[{"url":"http://127.0.0.1/a","size":"twelve","name":"a"}]}`,
			[]string{"file list of the job unreadable: ", "/manifest: unreadable: invalid JSON: json: cannot unmarshal string"}},
	}
	// Jobs to break: each fails at once (its file is not there) and waits in Failed.
	jids := make([]string, len(cases))
	bids := make([]string, len(cases))
	for i := range cases {
		bids[i] = p.submit(t, shared.deposits.URL+"/missing/planted.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	}
	for i, bid := range bids {
		p.waitBatch(t, bid, queue.BatchFailed)
		jids[i] = p.jobs(t, bid)[0].GetId()
	}

	// The estimator's Pending runner is the one that will take the jobs:
	// paused (its pause holds once the call returns), it leaves them be
	// until the nodes are broken.
	estimator := v1.NewStageServiceClient(dial(t, p.stack.Addr("estimator")))
	if _, err := estimator.Pause(ctx, &v1.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			estimator.Resume(ctx, &v1.ResumeRequest{})
		}
	}()
	raw := rawZooKeeper(t, p.stack.Servers, "")
	for i, tc := range cases {
		if _, err := p.admin.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: jids[i], State: v1.JobState_JOB_STATE_PENDING}); err != nil {
			t.Fatalf("requeueing %s: %v", jids[i], err)
		}
		node := p.stack.Root + "/jobs/" + jids[i] + "/" + tc.node
		if _, err := raw.Set(node, []byte(tc.data), -1); err != nil {
			t.Fatalf("planting %s: %v", node, err)
		}
	}
	if _, err := estimator.Resume(ctx, &v1.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	resumed = true

	for i, tc := range cases {
		t.Run(tc.node, func(t *testing.T) {
			node := p.stack.Root + "/jobs/" + jids[i] + "/" + tc.node
			var st *v1.JobStatus
			eventually(t, "job "+jids[i]+" failing on its broken "+tc.node, func(ctx context.Context) error {
				var err error
				if st, err = jobs.NewReader(p.q).JobStatus(ctx, jids[i]); err != nil {
					return err
				}
				// Its first failure (the missing file) does not name the node.
				if st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), node) {
					return errors.New("it is " + queue.JobStateName(st.GetStatus()) + ": " + st.GetMessage())
				}
				return nil
			})
			t.Logf("job %s: %s", jids[i], st.GetMessage())
			wantMessage(t, "job "+jids[i], st.GetMessage(), append([]string{node}, tc.want...))
			if tc.node == "configuration" {
				// Still broken after the failure: an operator reading the
				// job is told which node.
				_, err := p.admin.GetJob(ctx, &v1.GetJobRequest{JobId: jids[i]})
				wantStatus(t, err, codes.FailedPrecondition, node+": unreadable: invalid JSON")
			}
		})
	}

	if st, err := checkHealth(p.stack.Addr("estimator"), insecure.NewCredentials()); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("estimator after the broken jobs: %s, %v; want SERVING", st, err)
	}
	serve("/good/report.txt", goodFile)
	next := p.submit(t, shared.deposits.URL+"/good/report.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	if b := p.waitBatch(t, next, queue.BatchCompleted, queue.BatchFailed); b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Errorf("the next batch %s: %s %q", next, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
	}
	// The broken status took the job's history with it (its first attempt
	// reached Downloading, which its status no longer says), so only the
	// locks are checked before the batches go.
	for _, bid := range bids {
		p.checkUnlocked(t, bid)
		p.deleteBatch(t, bid)
	}
}
