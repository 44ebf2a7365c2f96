// Command batcher takes pending batches from the queue, creates their jobs,
// and reports on batches whose jobs have all finished.
//
// Its stage work is not written yet: today it connects to ZooKeeper and
// serves health, reflection, ingestq.v1.PingService and /metrics (see
// shared/service).
package main

import (
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/service"
)

func main() {
	service.Main(service.Spec{
		Name:     "batcher",
		Defaults: config.Defaults{Listen: "127.0.0.1:7401", MetricsListen: "127.0.0.1:9401"},
	})
}
