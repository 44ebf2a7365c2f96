// Command provisioner works on jobs in Provisioning: it lets a job go on to
// Downloading once there is room for its content.
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
		Name:     "provisioner",
		Defaults: config.Defaults{Listen: "127.0.0.1:7403", MetricsListen: "127.0.0.1:9403"},
	})
}
