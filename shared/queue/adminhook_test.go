package queue_test

import (
	"context"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
)

func init() {
	queue.SetAdmin(func(ctx context.Context, c *queue.Client, grace time.Duration) ([]string, error) {
		rep, err := admin.New(c).Fsck(ctx, admin.FsckOptions{Grace: grace})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, d := range rep.Damages {
			out = append(out, d.Kind+" "+d.Item+": "+d.Detail)
		}
		return out, nil
	}, func(c *queue.Client) queue.Operator { return admin.New(c) })
}
