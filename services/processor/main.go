// Command processor works on jobs in Processing: it builds and stores the
// object before the job goes on to Recording.
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
		Name:     "processor",
		Defaults: config.Defaults{Listen: "127.0.0.1:7405", MetricsListen: "127.0.0.1:9405"},
	})
}
