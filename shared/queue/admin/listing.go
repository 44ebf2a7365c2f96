package admin

import (
	"context"
	"fmt"
	"slices"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// ListWorkers reads every live replica's entry, sorted by service then id.
func (t *Queue) ListWorkers(ctx context.Context) ([]*v1.WorkerInfo, error) {
	names, _, err := t.z.Children(ctx, t.p.Own().Workers())
	if err != nil {
		return nil, fmt.Errorf("listing workers: %w", err)
	}
	ps := make([]string, len(names))
	for i, n := range names {
		ps[i] = t.p.Own().Worker(n)
	}
	datas, err := t.z.ReadData(ctx, ps)
	if err != nil {
		return nil, err
	}
	var out []*v1.WorkerInfo
	for i, d := range datas {
		if d == nil {
			continue // gone while listing
		}
		w := &v1.WorkerInfo{}
		// A replica of a newer version may report more than this
		// reader knows: what it knows is still read.
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(d, w); err != nil {
			w = &v1.WorkerInfo{Id: names[i], Stage: "unreadable entry: " + err.Error()}
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *v1.WorkerInfo) int {
		if a.GetService() != b.GetService() {
			if a.GetService() < b.GetService() {
				return -1
			}
			return 1
		}
		if a.GetId() < b.GetId() {
			return -1
		}
		if a.GetId() > b.GetId() {
			return 1
		}
		return 0
	})
	return out, nil
}

// ObjectLocks lists the ARK lock names held now under storage and inventory.
func (t *Queue) ObjectLocks(ctx context.Context) (storage, inventory []string, err error) {
	if storage, _, err = t.z.Children(ctx, t.p.Locks().Storage()); err != nil {
		return nil, nil, err
	}
	if inventory, _, err = t.z.Children(ctx, t.p.Locks().Inventory()); err != nil {
		return nil, nil, err
	}
	slices.Sort(storage)
	slices.Sort(inventory)
	return storage, inventory, nil
}
