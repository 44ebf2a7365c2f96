// Command downloader works on jobs in Downloading: it fetches a job's
// content and checks its digests before the job goes on to Processing.
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
		Name:     "downloader",
		Defaults: config.Defaults{Listen: "127.0.0.1:7404", MetricsListen: "127.0.0.1:9404"},
	})
}
