module github.com/ingestq/ingestq/shared

go 1.26.0

require (
	github.com/go-zookeeper/zk v1.0.4
	github.com/ingestq/ingestq/proto v0.0.0
	google.golang.org/protobuf v1.36.12
)

replace github.com/ingestq/ingestq/proto => ../proto
