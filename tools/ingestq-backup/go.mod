module github.com/ingestq/ingestq/tools/ingestq-backup

go 1.26.0

require (
	github.com/go-zookeeper/zk v1.0.4
	github.com/ingestq/ingestq/proto v0.0.0
	github.com/ingestq/ingestq/shared v0.0.0
	google.golang.org/grpc v1.85.0
	modernc.org/sqlite v1.61.1
)

require (
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	modernc.org/libc v1.79.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)

replace (
	github.com/ingestq/ingestq/proto => ../../proto
	github.com/ingestq/ingestq/shared => ../../shared
)
