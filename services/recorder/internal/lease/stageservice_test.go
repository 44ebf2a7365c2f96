package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/services/recorder/internal/recording"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

const token = "stage-service-test-token"

// replica is a recorder replica as main wires it: a running lease
// manager serving StageService and RecordingService on a loopback port of
// the shared server.
type replica struct {
	q      *session.Session
	id     string
	stages v1.StageServiceClient
	leases v1.RecordingServiceClient
}

func start(t *testing.T) *replica {
	t.Helper()
	q := queuetest.Connect(t, zktest.Root(t))
	m, err := lease.New(jobs.New(q), lease.Options{Address: "127.0.0.1:7406"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); m.Run(runCtx) }()
	srv, err := server.New(server.Options{AdminToken: token})
	if err != nil {
		t.Fatal(err)
	}
	v1.RegisterStageServiceServer(srv, stage.NewService(m))
	v1.RegisterRecordingServiceServer(srv, recording.Server{Leases: m})
	conn := servicetest.Serve(t, srv)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Drain(ctx) // ends waiting Lease calls before the server stops
		stop()
		<-ran
	})
	return &replica{q: q, id: m.Status().GetId(), stages: v1.NewStageServiceClient(conn), leases: v1.NewRecordingServiceClient(conn)}
}

// withToken is a call context carrying the admin token.
func withToken(t *testing.T) context.Context {
	return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
}

// recordingJob puts a job in Recording as the storing step leaves it.
func recordingJob(t *testing.T, q *session.Session) string {
	t.Helper()
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"}}, queue.Storing)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording,
		Inventory: &v1.Inventory{ManifestUrl: "file:///store/ark_99999_fk4x/v1/manifest.checkm", Mode: "add", Version: 1}})
	return jid
}

// lease asks RecordingService for a job, waiting up to wait.
func (r *replica) lease(t *testing.T, wait time.Duration) (*v1.LeaseResponse, error) {
	return r.leases.Lease(withToken(t), &v1.LeaseRequest{Wait: durationpb.New(wait), LeaseDuration: durationpb.New(time.Minute)})
}

// worker is the one worker of a StageService answer.
func worker(t *testing.T, ws []*v1.WorkerInfo) *v1.WorkerInfo {
	t.Helper()
	if len(ws) != 1 {
		t.Fatalf("workers %v, want the recorder's one", ws)
	}
	return ws[0]
}

func TestStatusShowsTheWorkerAndItsLeases(t *testing.T) {
	r := start(t)
	st, err := r.stages.GetStatus(t.Context(), &v1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if w := worker(t, st.GetWorkers()); w.GetId() != r.id || !strings.HasPrefix(w.GetId(), "recorder-") || w.GetService() != "recorder" ||
		w.GetStage() != "Recording" || w.GetAddress() != "127.0.0.1:7406" || w.GetPaused() || w.GetDraining() || len(w.GetInFlight()) != 0 {
		t.Fatalf("worker of an idle recorder: %v", w)
	}
	jid := recordingJob(t, r.q)
	l, err := r.lease(t, 10*time.Second)
	if err != nil || l.GetJobId() != jid {
		t.Fatalf("Lease = %v, %v; want %s", l, err, jid)
	}
	st, err = r.stages.GetStatus(t.Context(), &v1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if w := worker(t, st.GetWorkers()); len(w.GetInFlight()) != 1 || w.GetInFlight()[0].GetJobId() != jid {
		t.Errorf("in flight %v, want the leased %s", w.GetInFlight(), jid)
	}
	if _, err := r.leases.Complete(withToken(t), &v1.CompleteRequest{LeaseId: l.GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	st, err = r.stages.GetStatus(t.Context(), &v1.GetStatusRequest{})
	if w := worker(t, st.GetWorkers()); err != nil || len(w.GetInFlight()) != 0 || w.GetOutcomes()["advanced"] != 1 {
		t.Errorf("after Complete: %v, %v; want no lease in flight and one advanced", w, err)
	}
}

func TestOperatorMethodsNeedTheAdminToken(t *testing.T) {
	r := start(t)
	for name, call := range map[string]func(context.Context) error{
		"Pause":  func(ctx context.Context) error { _, err := r.stages.Pause(ctx, &v1.PauseRequest{}); return err },
		"Resume": func(ctx context.Context) error { _, err := r.stages.Resume(ctx, &v1.ResumeRequest{}); return err },
		"Drain":  func(ctx context.Context) error { _, err := r.stages.Drain(ctx, &v1.DrainRequest{}); return err },
	} {
		if err := call(t.Context()); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without the token: %v, want Unauthenticated", name, err)
		}
	}
	if _, err := r.stages.GetStatus(t.Context(), &v1.GetStatusRequest{}); err != nil {
		t.Errorf("GetStatus without the token: %v, want it open", err)
	}
}

func TestAPausedRecorderLeasesNothingUntilResumed(t *testing.T) {
	r := start(t)
	p, err := r.stages.Pause(withToken(t), &v1.PauseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !worker(t, p.GetWorkers()).GetPaused() {
		t.Errorf("Pause answered %v, want the worker paused", p.GetWorkers())
	}
	queuetest.Eventually(t, "the registry shows the pause", func() bool {
		ws, err := admin.New(r.q).Queue.ListWorkers(context.Background())
		return err == nil && len(ws) == 1 && ws[0].GetPaused()
	})
	jid := recordingJob(t, r.q)
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		if l, err := r.lease(t, wait); err != nil || l.GetLeaseId() != "" {
			t.Fatalf("Lease waiting %s while paused = %v, %v; want an empty answer", wait, l, err)
		}
	}
	if job, err := jobs.NewReader(r.q).GetJob(context.Background(), jid); err != nil || job.GetLocked() || job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job while paused: %v, %v; want it free in Recording", job, err)
	}
	// A call waiting when the pause ends takes the job.
	got := make(chan *v1.LeaseResponse, 1)
	go func() {
		l, err := r.lease(t, 20*time.Second)
		if err != nil {
			t.Errorf("Lease across the resume: %v", err)
		}
		got <- l
	}()
	waittest.Stays(t, 200*time.Millisecond, func() error {
		if len(got) > 0 {
			return errors.New("a Lease came back while the recorder was paused")
		}
		return nil
	})
	res, err := r.stages.Resume(withToken(t), &v1.ResumeRequest{})
	if err != nil || worker(t, res.GetWorkers()).GetPaused() {
		t.Fatalf("Resume = %v, %v; want the worker running", res, err)
	}
	select {
	case l := <-got:
		if l.GetJobId() != jid {
			t.Errorf("after the resume the waiting call got %v, want %s", l, jid)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting Lease call did not take the job after the resume")
	}
}

func TestDrainGivesBackWhatIsLateAndLeasesNoMore(t *testing.T) {
	r := start(t)
	jid := recordingJob(t, r.q)
	l, err := r.lease(t, 10*time.Second)
	if err != nil || l.GetJobId() != jid {
		t.Fatalf("Lease = %v, %v; want %s", l, err, jid)
	}
	// Drain waits for the lease until a tenth of the call's time is left
	// (stage.AnswerMargin at most), then gives it back and answers within
	// that tenth: half a second, room enough for the ZooKeeper writes on a
	// busy machine.
	ctx, cancel := context.WithTimeout(withToken(t), 5*time.Second)
	defer cancel()
	d, err := r.stages.Drain(ctx, &v1.DrainRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if w := worker(t, d.GetWorkers()); d.GetInFlightLeft() != 1 || !w.GetDraining() || len(w.GetInFlight()) != 0 {
		t.Errorf("Drain = %d left, worker %v; want 1 lease given back and the worker draining", d.GetInFlightLeft(), w)
	}
	if job, err := jobs.NewReader(r.q).GetJob(context.Background(), jid); err != nil || job.GetLocked() || job.GetStatus().GetStatus() != queue.Recording {
		t.Errorf("job after the drain: %v, %v; want it given back to Recording", job, err)
	}
	if _, err := r.leases.Complete(withToken(t), &v1.CompleteRequest{LeaseId: l.GetLeaseId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Complete of the given-back lease: %v, want FailedPrecondition", err)
	}
	if _, err := r.lease(t, 0); status.Code(err) != codes.Unavailable {
		t.Errorf("Lease after the drain: %v, want Unavailable", err)
	}
	// Resume does not undo a drain.
	if _, err := r.stages.Resume(withToken(t), &v1.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.lease(t, 0); status.Code(err) != codes.Unavailable {
		t.Errorf("Lease after a drain and a resume: %v, want Unavailable", err)
	}
}
