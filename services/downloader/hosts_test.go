package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

func TestAHostAtItsLimitTurnsJobsAwayAllOrNoneAndSpreadsTheirWaits(t *testing.T) {
	var h hostSlots
	if full, _ := h.take(1, "j1", []string{"a.example"}); full != "" {
		t.Fatalf("the first job of a.example was turned away (%s)", full)
	}
	// A job of two hosts, one of them full, takes neither.
	full, wait := h.take(1, "j2", []string{"a.example", "b.example"})
	if full != "a.example" || wait < turnWait/2 || wait > turnWait {
		t.Fatalf("take = %q, %v; want a.example full and a wait of about %v (first in line)", full, wait, turnWait)
	}
	if full, _ := h.take(1, "j3", []string{"b.example"}); full != "" {
		t.Fatalf("b.example was held by a job that did not get its slots (%s full)", full)
	}
	// The more jobs wait for a host, the longer each waits: about
	// hostRetriesPerSecond of them come back each second.
	for i := range 400 {
		full, wait = h.take(1, fmt.Sprintf("w%d", i), []string{"a.example"})
	}
	if want := 401 * time.Second / hostRetriesPerSecond; full != "a.example" || wait < want/2 || wait > want {
		t.Fatalf("the 401st waiting job: %q, %v; want a.example full and a wait of about %v", full, wait, want)
	}
	// Given back, the slot is kept for the job first in line, due back
	// soon: another job asking meanwhile waits; the first takes it and no
	// longer waits.
	h.give([]string{"a.example"})
	h.waiting["a.example"]["j2"].until = time.Now().Add(turnWait / 2) // due back, however slow this machine
	if full, _ := h.take(1, "w7", []string{"a.example"}); full != "a.example" {
		t.Fatal("a job that waited less took the slot freed for the one first in line")
	}
	if full, _ := h.take(1, "j2", []string{"a.example", "b.example"}); full != "b.example" {
		t.Fatalf("j2 asking for a.example and b.example: %q full, want b.example (still j3's)", full)
	}
	h.give([]string{"b.example"})
	if full, _ := h.take(1, "j2", []string{"a.example", "b.example"}); full != "" {
		t.Fatalf("j2, first in line, did not get the freed slots (%s full)", full)
	}
	if _, still := h.waiting["a.example"]["j2"]; still {
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
	host := []string{"depositor.example"}
	if full, _ := h.take(1, "busy", host); full != "" {
		t.Fatal(full)
	}
	// Jobs turned away in order; each wait is longer the more wait before it.
	var waits []time.Duration
	for i := range 10 {
		full, wait := h.take(1, fmt.Sprintf("j%d", i), host)
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
	h.give(host)
	for _, jid := range []string{"j5", "j9", "new"} {
		h.waiting[host[0]]["j0"].until = time.Now().Add(turnWait / 2)
		if full, _ := h.take(1, jid, host); full == "" {
			t.Fatalf("%s took the slot while j0, first in line, is due back", jid)
		}
	}
	if full, _ := h.take(1, "j0", host); full != "" {
		t.Fatalf("j0, first in line, was turned away")
	}
	// j1 is first in line now; gone elsewhere (taken by another replica),
	// it keeps no slot once its wait has lapsed.
	h.give(host)
	h.waiting[host[0]]["j1"].until = time.Now().Add(-2 * turnLapse)
	if full, _ := h.take(1, "j2", host); full != "" {
		t.Fatal("j2 was turned away for j1, whose wait lapsed")
	}
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
	h.take(1, "j1", []string{"gone.example"})
	h.take(1, "j2", []string{"gone.example"})
	h.give([]string{"gone.example"})
	// j2 was taken by another replica: its wait ended long ago.
	h.waiting["gone.example"]["j2"].until = time.Now().Add(-2 * hostWaitForgotten)
	h.pruned = time.Time{}
	h.take(1, "j3", []string{"other.example"})
	if len(h.waiting) != 0 || len(h.busy) != 1 {
		t.Errorf("waiting %v, busy %v; want no wait left and other.example busy", h.waiting, h.busy)
	}
}
