package main

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// slow makes host's downloads last a minute each, as if measured over an
// hour: its line is served at the least pace, hostRetriesPerSecond.
func (h *hostSlots) slow(host string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines[host].perJob = time.Minute
	h.lines[host].busySince = time.Now().Add(-time.Hour)
}

func TestAHostAtItsLimitTurnsJobsAwayAllOrNoneAndSpreadsTheirWaits(t *testing.T) {
	var h hostSlots
	ctx := t.Context()
	if full, _ := h.take(ctx, 1, "j1", []string{"a.example"}); full != "" {
		t.Fatalf("the first job of a.example was turned away (%s)", full)
	}
	h.slow("a.example")
	// A job of two hosts, one of them full, takes neither.
	full, wait := h.take(ctx, 1, "j2", []string{"a.example", "b.example"})
	if full != "a.example" || wait < turnWait/2 || wait > turnWait {
		t.Fatalf("take = %q, %v; want a.example full and a wait of about %v (first in line)", full, wait, turnWait)
	}
	if full, _ := h.take(ctx, 1, "j3", []string{"b.example"}); full != "" {
		t.Fatalf("b.example was held by a job that did not get its slots (%s full)", full)
	}
	// The more jobs wait for a slow host, the longer each waits: about
	// hostRetriesPerSecond of them come back each second.
	for i := range 400 {
		full, wait = h.take(ctx, 1, fmt.Sprintf("w%d", i), []string{"a.example"})
	}
	if want := 401 * time.Second / hostRetriesPerSecond; full != "a.example" || wait < want/2 || wait > want {
		t.Fatalf("the 401st waiting job: %q, %v; want a.example full and a wait of about %v", full, wait, want)
	}
	// Given back, the slot is kept for the job first in line, due back
	// soon: another job asking meanwhile waits; the first takes it and no
	// longer waits.
	h.give("j1", []string{"a.example"})
	h.lines["a.example"].waiting["j2"].until = time.Now().Add(turnWait / 2) // due back, however slow this machine
	if full, _ := h.take(ctx, 1, "w7", []string{"a.example"}); full != "a.example" {
		t.Fatal("a job that waited less took the slot freed for the one first in line")
	}
	if full, _ := h.take(ctx, 1, "j2", []string{"a.example", "b.example"}); full != "b.example" {
		t.Fatalf("j2 asking for a.example and b.example: %q full, want b.example (still j3's)", full)
	}
	h.give("j3", []string{"b.example"})
	if full, _ := h.take(ctx, 1, "j2", []string{"a.example", "b.example"}); full != "" {
		t.Fatalf("j2, first in line, did not get the freed slots (%s full)", full)
	}
	if _, still := h.lines["a.example"].waiting["j2"]; still {
		t.Error("a job that got its slot still counts as waiting")
	}
}

// TestAFreedSlotGoesToTheJobWaitingLongest: a replica's spare worker takes
// whatever job is free when it asks, and is turned away while the host is
// at its limit; a slot freed must go to the job that has waited longest,
// not to whichever job is taken at that moment. Otherwise, with a deep
// queue of one host's jobs, a job can wait minutes while younger ones pass.
func TestAFreedSlotGoesToTheJobWaitingLongest(t *testing.T) {
	var h hostSlots
	ctx := t.Context()
	host := []string{"depositor.example"}
	if full, _ := h.take(ctx, 1, "busy", host); full != "" {
		t.Fatal(full)
	}
	h.slow(host[0])
	// Jobs turned away in order; each wait is longer the more wait before it.
	var waits []time.Duration
	for i := range 10 {
		full, wait := h.take(ctx, 1, fmt.Sprintf("j%d", i), host)
		if full == "" {
			t.Fatalf("j%d got a slot of a host at its limit", i)
		}
		waits = append(waits, wait)
	}
	if waits[0] > turnWait || waits[9] < 10*time.Second/hostRetriesPerSecond/2 {
		t.Errorf("waits %v: the first in line comes back within %v, the tenth after about %v", waits, turnWait, 10*time.Second/hostRetriesPerSecond)
	}
	// The slot frees; younger jobs ask first, and are turned away while j0
	// is due back.
	h.give("busy", host)
	for _, jid := range []string{"j5", "j9", "new"} {
		h.lines[host[0]].waiting["j0"].until = time.Now().Add(turnWait / 2)
		if full, _ := h.take(ctx, 1, jid, host); full == "" {
			t.Fatalf("%s took the slot while j0, first in line, is due back", jid)
		}
	}
	if full, _ := h.take(ctx, 1, "j0", host); full != "" {
		t.Fatalf("j0, first in line, was turned away")
	}
	// j1 is first in line now; gone elsewhere (taken by another replica),
	// it keeps no slot once its wait has lapsed.
	h.give("j0", host)
	h.lines[host[0]].waiting["j1"].until = time.Now().Add(-2 * turnLapse)
	if full, _ := h.take(ctx, 1, "j2", host); full != "" {
		t.Fatal("j2 was turned away for j1, whose wait lapsed")
	}
}

// TestAJobWhoseTurnIsDueWaitsForTheSlotInLineOrder: with a fast host at
// its limit, the job first in line waits in take for the next slot rather
// than coming back too early or too late; at most half the host's limit
// of jobs wait so, the ones longest in line, and a slow host's jobs never
// do (they would hold workers the limit leaves to other hosts).
func TestAJobWhoseTurnIsDueWaitsForTheSlotInLineOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hostSlots
		ctx := t.Context()
		host := []string{"fast.example"}
		for _, jid := range []string{"a", "b"} {
			if full, _ := h.take(ctx, 2, jid, host); full != "" {
				t.Fatal(full)
			}
		}
		time.Sleep(10 * time.Millisecond) // synctest's time: a job takes 10 ms
		h.give("a", host)                 // a completion every 5 ms
		h.take(ctx, 2, "c", host)
		// old is turned away while "fast.example" is full and holds no one.
		h.mu.Lock()
		_, _, _ = h.admit(2, "old", host, false)
		h.mu.Unlock()
		time.Sleep(time.Millisecond) // synctest's time: old asked first

		type result struct {
			full string
			wait time.Duration
		}
		results := map[string]chan result{}
		ask := func(jid string) {
			results[jid] = make(chan result, 1)
			go func() {
				full, wait := h.take(ctx, 2, jid, host)
				results[jid] <- result{full, wait}
			}()
			synctest.Wait()
		}
		ask("young")
		if len(results["young"]) != 0 {
			t.Fatal("a job due within a few completions was not held for its slot")
		}
		// Held, young waits; a younger one is turned away (one is held at
		// most: half the limit of 2), and old, back, takes young's place.
		ask("younger")
		if r := <-results["younger"]; r.full == "" {
			t.Fatal("younger got a slot of a host at its limit")
		}
		ask("old")
		if r := <-results["young"]; r.full == "" {
			t.Fatal("young kept its place held while a job longer in line asked")
		}
		if len(results["old"]) != 0 {
			t.Fatal("old, first in line, was not held")
		}
		start := time.Now()
		h.give("b", host)
		if r := <-results["old"]; r.full != "" || time.Since(start) != 0 {
			t.Fatalf("old: %+v after %v; want the freed slot at once", r, time.Since(start))
		}
		// A slow host's job is turned away at once, holding no worker.
		h.slow("fast.example")
		h.give("c", host)
		h.take(ctx, 2, "d", host)
		ask("e")
		if r := <-results["e"]; r.full == "" || time.Since(start) != 0 {
			t.Fatalf("e: %+v after %v; want it turned away at once", r, time.Since(start))
		}
	})
}

// TestAHostWatchedBrieflyIsNotTrustedFarAhead: the first downloads from a
// host are often slow (connections opened, files created), and a job told
// to wait from them alone would wait long after the host sped up. Its wait
// is at most eight times as long as the host has been watched.
func TestAHostWatchedBrieflyIsNotTrustedFarAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hostSlots
		host := []string{"new.example"}
		for i := range 32 {
			h.take(t.Context(), 32, fmt.Sprintf("busy%d", i), host)
		}
		time.Sleep(100 * time.Millisecond) // synctest's time: the host watched for 100 ms
		var longest time.Duration
		for i := range 500 {
			h.mu.Lock()
			full, wait, _ := h.admit(32, fmt.Sprintf("j%d", i), host, false)
			h.mu.Unlock()
			if full == "" {
				t.Fatalf("j%d got a slot of a host at its limit", i)
			}
			longest = max(longest, wait)
		}
		if longest > 800*time.Millisecond {
			t.Errorf("the longest wait is %v for a host watched for 100ms; want 800ms at most", longest)
		}
	})
}

func TestTheHostsOfAJobAreItsFilesHostsOnce(t *testing.T) {
	m := &v1.Manifest{Files: []*v1.ManifestFile{
		{Url: "http://B.example:8080/1"}, {Url: "https://a.example/2"}, {Url: "http://b.example/3"},
		{Url: "http://[::1]:80/4"}, {Url: "%zz"}, {Url: "file:///etc/passwd"},
	}}
	if got, want := hostsOf(m), []string{"::1", "a.example", "b.example"}; !slices.Equal(got, want) {
		t.Errorf("hostsOf = %q, want %q", got, want)
	}
}

func TestWaitsOfJobsNeverSeenAgainAreForgotten(t *testing.T) {
	var h hostSlots
	ctx := t.Context()
	h.take(ctx, 1, "j1", []string{"gone.example"})
	h.slow("gone.example")
	h.take(ctx, 1, "j2", []string{"gone.example"})
	h.give("j1", []string{"gone.example"})
	// j2 was taken by another replica: its wait ended long ago, and so did
	// the host's last download.
	h.lines["gone.example"].waiting["j2"].until = time.Now().Add(-2 * hostWaitForgotten)
	h.lines["gone.example"].moved = time.Now().Add(-2 * hostWaitForgotten)
	h.pruned = time.Time{}
	h.take(ctx, 1, "j3", []string{"other.example"})
	if len(h.lines) != 1 || h.lines["other.example"] == nil || h.lines["other.example"].busy != 1 {
		t.Errorf("lines %v; want other.example alone, busy", h.lines)
	}
}

// drain runs a backlog of n jobs of one host through a replica of the
// given workers, in synctest's time: each worker takes the lowest-numbered
// job not waiting (as a consumer's snapshot offers them), downloads it in
// perJob if the host lets it, or leaves it to wait as long as take says.
// A claim and a commit take a few milliseconds. It stops when every job is
// done or, jobs still left, after horizon; it returns how long the
// backlog took, how many jobs were done and how many times jobs were
// turned away.
func drain(t *testing.T, n, workers, limit int, perJob, horizon time.Duration) (took time.Duration, done, turnedAway int) {
	synctest.Test(t, func(t *testing.T) {
		var h hostSlots
		host := []string{"depositor.example"}
		const claim = 2 * time.Millisecond
		var mu sync.Mutex
		waitUntil := make([]time.Time, n)
		state := make([]int, n) // 0 free, 1 taken, 2 done
		start := time.Now()
		// next takes the first free job, or says when one may be free.
		next := func() (job int, wake time.Time, over bool) {
			mu.Lock()
			defer mu.Unlock()
			if done == n || time.Since(start) >= horizon {
				return -1, time.Time{}, true
			}
			for j := range n {
				switch {
				case state[j] != 0:
				case waitUntil[j].After(time.Now()):
					if wake.IsZero() || waitUntil[j].Before(wake) {
						wake = waitUntil[j]
					}
				default:
					state[j] = 1
					return j, time.Time{}, false
				}
			}
			return -1, wake, false
		}
		var wg sync.WaitGroup
		for w := range workers {
			// Claims of a few milliseconds, a little different each:
			// no two jobs are turned away at the same instant.
			claim := claim + time.Duration(w)*time.Microsecond
			wg.Go(func() {
				for {
					j, wake, over := next()
					if over {
						return
					}
					// In synctest's time, sleeping is how the simulated
					// workers spend theirs: idle, claiming, downloading.
					if j < 0 {
						time.Sleep(min(5*time.Millisecond, max(time.Until(wake), time.Millisecond))) // idle
						continue
					}
					time.Sleep(claim) // claiming
					jid := fmt.Sprint(j)
					full, wait := h.take(t.Context(), limit, jid, host)
					if full == "" {
						time.Sleep(perJob) // downloading
						h.give(jid, host)
					}
					time.Sleep(claim) // committing
					mu.Lock()
					if full == "" {
						state[j] = 2
						done++
					} else {
						state[j] = 0
						waitUntil[j] = time.Now().Add(wait)
						turnedAway++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		took = time.Since(start)
	})
	return took, done, turnedAway
}

// TestAFastHostsBacklogDrainsAtTheHostsOwnPace: a backlog of thousands of
// one host's jobs goes through about as fast as its limit of downloads at
// once allows, each job turned away a few times at most. Were the host's
// line served at a fixed pace, the backlog would drain at that pace.
func TestAFastHostsBacklogDrainsAtTheHostsOwnPace(t *testing.T) {
	for _, c := range []struct {
		n, workers, limit int
		perJob            time.Duration
		turnedAway        float64 // most times a job is turned away, on average
	}{
		{2000, 64, 32, 30 * time.Millisecond, 2.5},
		{2000, 64, 32, 5 * time.Millisecond, 2},
		{500, 4, 2, 50 * time.Millisecond, 5},
		{500, 64, 32, time.Second, 6},
	} {
		// The fastest the limit allows: limit jobs at once, each its
		// download and a claim and a commit.
		fastest := time.Duration(c.n/c.limit) * (c.perJob + 4*time.Millisecond)
		took, done, away := drain(t, c.n, c.workers, c.limit, c.perJob, time.Hour)
		t.Logf("%d jobs, %d workers, %d a host, %v each: took %v (the limit allows %v), turned away %d times (%.2f a job)",
			c.n, c.workers, c.limit, c.perJob, took, fastest, away, float64(away)/float64(c.n))
		if done != c.n || took > 2*fastest {
			t.Errorf("%d jobs of %v each, %d at once: %d done in %v; want all in %v at most (twice the fastest)", c.n, c.perJob, c.limit, done, took, 2*fastest)
		}
		if float64(away) > c.turnedAway*float64(c.n) {
			t.Errorf("%d jobs of %v each, %d at once: turned away %d times, want %.1f a job at most", c.n, c.perJob, c.limit, away, c.turnedAway)
		}
	}
}

// TestAStalledHostsBacklogIsTakenAgainAtTheLeastPace: a host whose
// downloads do not end has its backlog taken again a few times a second,
// not as fast as the spare workers could take it.
func TestAStalledHostsBacklogIsTakenAgainAtTheLeastPace(t *testing.T) {
	const n, horizon = 1000, time.Minute
	_, done, away := drain(t, n, 64, 32, time.Hour, horizon)
	t.Logf("%d jobs of a stalled host: turned away %d times in %v", n, away, horizon)
	// Each job is turned away once as the spare workers first take it;
	// then, at the least pace, a job k-th in line comes back every
	// max(k, 4)/4 s: about 30 a second for a line of a thousand. The
	// first seconds, before the host is seen to stall, may cost as much
	// again.
	most := 2 * (n + 30*int(horizon/time.Second))
	if done > 32 || away > most {
		t.Errorf("%d done, turned away %d times in %v; want the 32 first only, and at most %d", done, away, horizon, most)
	}
}
