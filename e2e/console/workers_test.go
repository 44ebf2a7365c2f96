package console

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/console/web"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/loopbacktest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/credentials/insecure"
)

// startReplica runs a stage replica (an estimator that takes nothing) with
// its gRPC server on a loopback port, guarded by the admin token, as a
// service would: it registers with that address.
func startReplica(t *testing.T, f *fixture) (string, *stage.Runner) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(server.Options{Logger: log, AdminToken: testToken})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runner, stop := startEstimating(t, f, srv, lis.Addr().String())
	srv.SetServing(true)
	go srv.Serve(lis)
	t.Cleanup(func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	id := runner.WorkerID()
	queuetest.Eventually(t, "the replica registers", func() bool {
		ws, err := admin.New(f.q).Queue.ListWorkers(f.ctx)
		return err == nil && len(ws) == 1 && ws[0].GetId() == id
	})
	return id, runner
}

// startEstimating starts an estimating stage on f's queue that releases
// whatever it takes, with srv as its server and addr as the gRPC address
// its registry entry names; stop ends it.
func startEstimating(t *testing.T, f *fixture, srv *server.Server, addr string) (runner *stage.Runner, stop context.CancelFunc) {
	t.Helper()
	env := &service.Env{Name: "estimator", Config: &config.Common{Advertise: addr, Concurrency: 1},
		Logger: slog.New(slog.DiscardHandler), Session: f.q, Jobs: jobs.New(f.q), Server: srv}
	ctx, stop := context.WithCancel(context.Background())
	runners, err := stage.Start(ctx, env, stage.Config{Name: "estimating", From: queue.Estimating, To: queue.Provisioning,
		Handler: func(context.Context, stage.Job) stage.Outcome { return stage.Release() }})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return runners[0], stop
}

// workerState reads a worker's registry entry (nil: none).
func workerState(t *testing.T, f *fixture, id string) *v1.WorkerInfo {
	t.Helper()
	ws, err := admin.New(f.q).Queue.ListWorkers(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.GetId() == id {
			return w
		}
	}
	return nil
}

// TestWorkersTablePausesResumesAndDrainsAReplica: the queue page of a
// signed-in operator offers each registered replica's controls; pausing,
// resuming and draining one goes to its StageService at the address its
// registry entry holds, with the admin token, and the entry follows.
func TestWorkersTablePausesResumesAndDrainsAReplica(t *testing.T) {
	f := newFixtureWith(t, testToken, insecure.NewCredentials())
	f.signIn()
	id, _ := startReplica(t, f)
	if addr := workerState(t, f, id).GetAddress(); !strings.HasPrefix(addr, "127.0.0.1:") { // nil reads as ""
		t.Fatalf("the registry holds address %q", addr)
	}
	page := f.get("/")
	wantBody(t, page, `<th>Control</th>`, `action="`+workerURL(id)+`/pause"`, `<template id="worker-controls">`)

	for _, step := range []struct {
		action, flash string
		paused, drain bool
	}{
		{"pause", "is paused", true, false},
		{"resume", "takes jobs again", false, false},
		{"drain", "is drained", false, true},
	} {
		a := f.act(workerURL(id)+"/"+step.action, url.Values{"confirmed": {"1"}})
		if a.code != http.StatusSeeOther {
			t.Fatalf("%s: %d\n%s", step.action, a.code, a.body)
		}
		wantBody(t, f.get("/"), step.flash)
		queuetest.Eventually(t, "the registry entry after "+step.action, func() bool {
			w := workerState(t, f, id)
			if step.drain {
				// Drained, the replica's runner ends and leaves the registry.
				return w == nil || w.GetDraining()
			}
			return w != nil && w.GetPaused() == step.paused && !w.GetDraining()
		})
	}
	if a := f.act(workerURL("estimator-nowhere-1-x")+"/pause", nil); a.code != http.StatusNotFound {
		t.Errorf("an unknown worker: %d, want 404", a.code)
	}
}

// TestWorkersTableOffersNoControlsWithoutAWayToTheReplicas: without stage
// credentials, or signed out, the table has no Control column.
func TestWorkersTableOffersNoControlsWithoutAWayToTheReplicas(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	startReplica(t, f)
	wantNot(t, f.get("/"), `<th>Control</th>`, `worker-controls`)
}

// TestAReplicaThatNeverAnswersIsAnErrorWithinTheStageTimeout: a replica
// whose registered address accepts connections and never answers makes a
// pause, a resume or a drain an error naming the replica and the bound,
// once the console's StageTimeout (or drainWait) is spent, not the whole
// request's time.
func TestAReplicaThatNeverAnswersIsAnErrorWithinTheStageTimeout(t *testing.T) {
	silent := loopbacktest.Silent(t)
	f := newFixtureOpts(t, testToken, zktest.Root(t), web.Options{StageCredentials: insecure.NewCredentials(),
		StageTimeout: 300 * time.Millisecond})
	f.signIn()
	id := registerReplicaAt(t, f, silent)

	form := url.Values{"confirmed": {"1"}, "csrf": {f.csrf()}}
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+workerURL(id)+"/pause", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	type result struct {
		code int
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := f.client.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		done <- result{resp.StatusCode, string(body), err}
	}()
	var got result
	select {
	case got = <-done:
	case <-time.After(queuetest.Wait):
		// Far past the 300ms bound, yet well within the request's own 2 minutes.
		t.Fatalf("no answer to the pause in %s", queuetest.Wait)
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	want := "worker " + id + " (estimator at " + silent + ") did not answer pause within 300ms"
	if got.code != http.StatusGatewayTimeout || !strings.Contains(html.UnescapeString(got.body), want) {
		t.Errorf("pause of a silent replica: %d, want %d and the page saying %q:\n%s", got.code, http.StatusGatewayTimeout, want, got.body)
	}
}

// registerReplicaAt registers a stage replica (an estimator that takes
// nothing) whose registry entry names addr as its gRPC address, whatever
// listens there.
func registerReplicaAt(t *testing.T, f *fixture, addr string) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(server.Options{Logger: log, AdminToken: testToken})
	if err != nil {
		t.Fatal(err)
	}
	runner, stop := startEstimating(t, f, srv, addr)
	t.Cleanup(func() {
		stop()
		<-runner.Done()
	})
	id := runner.WorkerID()
	queuetest.Eventually(t, "the replica registers", func() bool {
		return workerState(t, f, id) != nil
	})
	return id
}
