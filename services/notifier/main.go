// Command notifier works on jobs in Notify: it tells the submitter that the
// job is done and completes it.
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
		Name:     "notifier",
		Defaults: config.Defaults{Listen: "127.0.0.1:7407", MetricsListen: "127.0.0.1:9407"},
	})
}
