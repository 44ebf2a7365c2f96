// Command recorder works on jobs in Recording: it records the stored object
// in the inventory before the job goes on to Notify.
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
		Name:     "recorder",
		Defaults: config.Defaults{Listen: "127.0.0.1:7406", MetricsListen: "127.0.0.1:9406"},
	})
}
