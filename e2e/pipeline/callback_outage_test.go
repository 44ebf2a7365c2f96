package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/waittest"
)

// outageFor is how long the outage profile's callback endpoint is down.
const outageFor = 20 * time.Second

// TestACallbackEndpointDownFor20sGetsItsCallbackOnceBackAndTheJobCompletes:
// a profile's callback endpoint refuses connections for 20 s. The job whose
// callback falls in that time is stored and recorded; it waits in Notify,
// its history saying why, and is neither failed nor left behind: once the
// endpoint is back the callback arrives there, once, under the job's
// Idempotency-Key, and the job and its batch complete, the report saying
// completed.
func TestACallbackEndpointDownFor20sGetsItsCallbackOnceBackAndTheJobCompletes(t *testing.T) {
	t.Parallel()
	down := time.Now()
	bid := submit(t, "outage", "/objects/letters-1921/README.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	// The job reaches Notify and its callback is not delivered: it waits
	// there, a stay in Notify in its history.
	var job *v1.Job
	waittest.Until(t, outageFor, func() error {
		if js := batchJobs(t, bid); len(js) == 1 {
			resp, err := shared.admin.GetJob(adminCtx(context.Background()), &v1.GetJobRequest{JobId: js[0].GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if job = resp.GetJob(); pendingStay(job) != nil {
				return nil
			}
		}
		return fmt.Errorf("no callback pending %s into the outage: job %v (logs in %s)", outageFor, job.GetStatus(), shared.stack.LogDir)
	})
	jid := job.GetId()
	stay := pendingStay(job)
	if !strings.Contains(stay.GetMessage(), "connection refused") || !strings.Contains(stay.GetMessage(), "pending: tried again") {
		t.Errorf("the job's stay in Notify says %q, want the refused connection and that it is tried again", stay.GetMessage())
	}
	waittest.For(t.Context(), time.Until(down.Add(outageFor))) // the rest of the outage itself: nothing to wait for
	up, err := shared.outage.Up()
	if err != nil {
		t.Fatal(err)
	}
	b := waitBatch(t, bid, queue.BatchCompleted, queue.BatchFailed)
	if b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Fatalf("batch %s is %s: %s", bid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
	}
	resp, err := shared.admin.GetJob(adminCtx(context.Background()), &v1.GetJobRequest{JobId: jid})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetJob().GetStatus(); st.GetStatus() != queue.Completed || !strings.HasPrefix(st.GetMessage(), "callback "+shared.outage.URL+"/done delivered") {
		t.Errorf("job %s is %s: %q; want Completed, its callback delivered", jid, queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	checkStoredAndRecorded(t, resp.GetJob())
	got := shared.outage.deliveries(jid)
	if len(got) != 1 {
		t.Fatalf("%d callbacks received under key %s, want 1: %v", len(got), jid, got)
	}
	if got[0].at.Before(up) || got[0].body["jid"] != jid || got[0].body["status"] != "completed" || got[0].body["bid"] != bid {
		t.Errorf("callback %v received at %s, the endpoint up at %s", got[0].body, got[0].at, up)
	}
	if n := shared.outage.total(); n != 1 {
		t.Errorf("%d callbacks received in all, want 1", n)
	}
	mails := emails(t, bid)
	if report := mails[bid+"-report.eml"]; !strings.Contains(report, "Subject: ingestq batch "+bid+": completed: all 1 object(s) completed") {
		t.Errorf("the report does not say completed:\n%s", report)
	}
}

// pendingStay is the job's last history entry when it is a stay in
// Notify (a callback pending), else nil.
func pendingStay(j *v1.Job) *v1.JobStateChange {
	hs := j.GetStatus().GetHistory()
	if j.GetStatus().GetStatus() != queue.Notify || len(hs) == 0 {
		return nil
	}
	if h := hs[len(hs)-1]; h.GetFrom() == queue.Notify && h.GetTo() == queue.Notify {
		return h
	}
	return nil
}

// outageReceiver is a depositor's callback endpoint that is down (nothing
// listens on its port: a connection is refused) until Up, then counts
// every POST by its Idempotency-Key.
type outageReceiver struct {
	URL   string
	addr  string
	ports *freeport.Reservation

	mu  sync.Mutex
	srv *http.Server
	got map[string][]delivery
}

type delivery struct {
	at   time.Time
	body map[string]any
}

func newOutageReceiver() (*outageReceiver, error) {
	ports := freeport.Reserve()
	addrs, err := ports.Take(1)
	if err != nil {
		ports.Close()
		return nil, err
	}
	return &outageReceiver{URL: "http://" + addrs[0].String(), addr: addrs[0].String(), ports: ports, got: map[string][]delivery{}}, nil
}

// Up starts serving on the endpoint's port and returns when.
func (o *outageReceiver) Up() (time.Time, error) {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return time.Time{}, fmt.Errorf("callback endpoint back up: %w", err)
	}
	up := time.Now()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		o.got[key] = append(o.got[key], delivery{at: time.Now(), body: body})
	})}
	o.mu.Lock()
	o.srv = srv
	o.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("callback endpoint:", err)
		}
	}()
	return up, nil
}

func (o *outageReceiver) deliveries(key string) []delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got[key]
}

func (o *outageReceiver) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, d := range o.got {
		n += len(d)
	}
	return n
}

func (o *outageReceiver) Close() {
	o.mu.Lock()
	srv := o.srv
	o.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	o.ports.Close()
}
