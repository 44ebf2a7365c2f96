package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_PROFILES_DIR", servicetest.ExampleProfiles(t))
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "notifier")
}

func TestBuiltNotifierCallsBackAndCompletesTheJob(t *testing.T) {
	bin := servicetest.Build(t, ".")
	got := make(chan map[string]any, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		data, _ := io.ReadAll(r.Body)
		json.Unmarshal(data, &body)
		got <- body
	}))
	defer rcv.Close()
	profiles := t.TempDir()
	os.WriteFile(filepath.Join(profiles, "demo.yaml"), []byte("name: demo\ncollection: demo\ncallback_url: "+rcv.URL+"/done\n"), 0o644)

	zkRoot, workRoot := zktest.Root(t), t.TempDir()
	servicetest.Start(t, bin, zkRoot, "INGESTQ_PROFILES_DIR="+profiles, "INGESTQ_WORK_ROOT="+workRoot, "INGESTQ_CALLBACK_ALLOW=loopback")

	q := queuetest.Connect(t, zkRoot)
	wd := filepath.Join(workRoot, "bid0000000001", "jid0000000001")
	os.MkdirAll(filepath.Join(wd, "producer"), 0o755)
	jid := queuetest.Spawn(t, q, batches.NewJob{
		Configuration: &v1.JobConfiguration{ProfileName: "demo", WorkingDir: wd},
		Identifiers:   &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"},
	}, queue.Notify)
	select {
	case body := <-got:
		if body["jid"] != jid || body["ark"] != "ark:/99999/fk4x" || body["status"] != "completed" {
			t.Errorf("callback body %v", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no callback within 30s")
	}
	queuetest.Eventually(t, "the job is Completed", func() bool { return queuetest.Status(t, q, jid).GetStatus() == queue.Completed })
	if _, err := os.Stat(wd); !os.IsNotExist(err) {
		t.Errorf("working folder still there: %v", err)
	}
}

func TestBuiltNotifierRefusesCallbacksToInternalAddressesByDefault(t *testing.T) {
	bin := servicetest.Build(t, ".")
	var calls atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer rcv.Close()
	callbacks := []struct{ profile, url, why string }{
		{"loop", rcv.URL + "/done", "127.0.0.1 is in 127.0.0.0/8, an internal range denied unless allowed (INGESTQ_CALLBACK_ALLOW=127.0.0.0/8 allows it)"},
		{"private", "http://192.168.7.7/done", "192.168.7.7 is in 192.168.0.0/16, an internal range denied unless allowed (INGESTQ_CALLBACK_ALLOW=192.168.0.0/16 allows it)"},
		{"metadata", "http://169.254.169.254/latest", "169.254.169.254 is in 169.254.0.0/16"},
	}
	profiles := t.TempDir()
	for _, c := range callbacks {
		os.WriteFile(filepath.Join(profiles, c.profile+".yaml"), []byte("name: "+c.profile+"\ncollection: "+c.profile+"\ncallback_url: "+c.url+"\n"), 0o644)
	}
	zkRoot, workRoot := zktest.Root(t), t.TempDir()
	servicetest.Start(t, bin, zkRoot, "INGESTQ_PROFILES_DIR="+profiles, "INGESTQ_WORK_ROOT="+workRoot)

	q := queuetest.Connect(t, zkRoot)
	for _, c := range callbacks {
		jid := queuetest.Spawn(t, q, batches.NewJob{
			Configuration: &v1.JobConfiguration{ProfileName: c.profile, WorkingDir: filepath.Join(workRoot, "bid0000000001", c.profile)},
			Identifiers:   &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"},
		}, queue.Notify)
		var st *v1.JobStatus
		queuetest.Eventually(t, jid+" leaves Notify", func() bool {
			st = queuetest.Status(t, q, jid)
			return st.GetStatus() != queue.Notify
		})
		if st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "callback "+c.url) || !strings.Contains(st.GetMessage(), "address denied by policy: "+c.why) {
			t.Errorf("%s: job %s %q, want Failed naming the callback and %q", c.profile, queue.JobStateName(st.GetStatus()), st.GetMessage(), c.why)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the receiver on loopback got %d callbacks under the default settings", n)
	}
}
