package admin

import (
	"cmp"
	"context"
	"slices"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Aggregates counts the queue's jobs as GetAggregates answers: by
// collection and state with the space they need, each collection's by
// batch, and the jobs that completed and failed in each of the last hours
// and days (UTC, by their status's last change), newest first. It reads
// every job as Jobs.Search does.
func (t *Queue) Aggregates(ctx context.Context, now time.Time, hours, days int) (*v1.GetAggregatesResponse, error) {
	jids, err := t.searchCandidates(ctx, "", nil)
	if err != nil {
		return nil, err
	}
	now = now.UTC()
	resp := &v1.GetAggregatesResponse{AsOf: timestamppb.New(now)}
	hour0, day0 := now.Truncate(time.Hour), time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	hourStart := func(i int) time.Time { return hour0.Add(-time.Duration(i) * time.Hour) }
	dayStart := func(i int) time.Time { return day0.AddDate(0, 0, -i) }
	resp.Hours = make([]*v1.EndedTally, hours)
	for i := range resp.Hours {
		resp.Hours[i] = &v1.EndedTally{Start: timestamppb.New(hourStart(i))}
	}
	resp.Days = make([]*v1.EndedTally, days)
	for i := range resp.Days {
		resp.Days[i] = &v1.EndedTally{Start: timestamppb.New(dayStart(i))}
	}
	type tally struct {
		states map[queue.JobState]*v1.StateTally
		jobs   int32
		space  int64
	}
	add := func(t *tally, st queue.JobState, space int64) {
		if t.states == nil {
			t.states = map[queue.JobState]*v1.StateTally{}
		}
		s := t.states[st]
		if s == nil {
			s = &v1.StateTally{State: queue.JobStateName(st)}
			t.states[st] = s
		}
		s.Jobs++
		s.SpaceNeeded += space
		t.jobs++
		t.space += space
	}
	colls := map[string]*tally{}
	batches := map[string]map[string]*tally{} // collection → bid → tally
	// count puts a job that ended at `at` in the slot it falls in; slot i
	// runs from step(i) to step(i-1).
	count := func(slots []*v1.EndedTally, step func(int) time.Time, st queue.JobState, at time.Time) {
		for i := range slots {
			if !at.Before(step(i)) {
				if at.Before(step(i - 1)) {
					if st == queue.Completed {
						slots[i].Completed++
					} else {
						slots[i].Failed++
					}
				}
				return
			}
		}
	}
	for len(jids) > 0 {
		window := jids[:min(len(jids), jobs.ReadJobsWindow)]
		jobs, err := t.reader.ReadJobs(ctx, window)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j == nil {
				continue
			}
			resp.JobsRead++
			st, coll := j.GetStatus().GetStatus(), j.GetConfiguration().GetCollection()
			if colls[coll] == nil {
				colls[coll], batches[coll] = &tally{}, map[string]*tally{}
			}
			add(colls[coll], st, j.GetSpaceNeeded())
			if batches[coll][j.GetBid()] == nil {
				batches[coll][j.GetBid()] = &tally{}
			}
			add(batches[coll][j.GetBid()], st, j.GetSpaceNeeded())
			if st == queue.Completed || st == queue.Failed {
				at := j.GetStatus().GetLastModified().AsTime()
				count(resp.Hours, hourStart, st, at)
				count(resp.Days, dayStart, st, at)
			}
		}
		jids = jids[len(window):]
	}
	states := func(t *tally) []*v1.StateTally {
		var out []*v1.StateTally
		for _, st := range queue.JobStates() {
			if s := t.states[st]; s != nil {
				out = append(out, s)
			}
		}
		return out
	}
	for coll, t := range colls {
		ct := &v1.CollectionTally{Collection: coll, States: states(t), Jobs: t.jobs, SpaceNeeded: t.space}
		for bid, bt := range batches[coll] {
			ct.Batches = append(ct.Batches, &v1.BatchTally{BatchId: bid, States: states(bt), Jobs: bt.jobs, SpaceNeeded: bt.space})
		}
		slices.SortFunc(ct.Batches, func(a, b *v1.BatchTally) int { return cmp.Compare(b.GetBatchId(), a.GetBatchId()) })
		resp.Collections = append(resp.Collections, ct)
	}
	slices.SortFunc(resp.Collections, func(a, b *v1.CollectionTally) int { return cmp.Compare(a.GetCollection(), b.GetCollection()) })
	return resp, nil
}
