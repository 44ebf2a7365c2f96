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
	if full != "a.example" || wait < minHostWait/2 || wait > minHostWait {
		t.Fatalf("take = %q, %v; want a.example full and a wait of about %v", full, wait, minHostWait)
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
	// Given back, the slot is taken by the next job, which no longer waits.
	h.give([]string{"a.example"})
	if full, _ := h.take(1, "w7", []string{"a.example"}); full != "" {
		t.Fatalf("a freed slot was not taken (%s full)", full)
	}
	if _, still := h.waiting["a.example"]["w7"]; still {
		t.Error("a job that got its slot still counts as waiting")
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
	h.waiting["gone.example"]["j2"] = time.Now().Add(-2 * hostWaitForgotten)
	h.pruned = time.Time{}
	h.take(1, "j3", []string{"other.example"})
	if len(h.waiting) != 0 || len(h.busy) != 1 {
		t.Errorf("waiting %v, busy %v; want no wait left and other.example busy", h.waiting, h.busy)
	}
}
