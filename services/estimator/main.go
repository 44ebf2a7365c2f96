// Command estimator works on jobs in Estimating: it estimates the space a
// job's content needs and moves the job on to Provisioning.
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
		Name:     "estimator",
		Defaults: config.Defaults{Listen: "127.0.0.1:7402", MetricsListen: "127.0.0.1:9402"},
	})
}
