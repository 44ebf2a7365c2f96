package session

import (
	"fmt"
	"os"
	"strings"
)

// ProcessName names this process: service (when given), host and process
// id, as "estimator-host-1234", in the characters a worker id may hold
// (queue.ValidWorkerID). It is the worker a service's session records in
// the history of the jobs it moves, and the start of its runners' worker
// ids.
func ProcessName(service string) string {
	host, _ := os.Hostname()
	name := fmt.Sprintf("%s-%d", workerIDPart(host), os.Getpid())
	if service != "" {
		name = workerIDPart(service) + "-" + name
	}
	return name
}

// workerIDPart keeps the characters a worker id may hold.
func workerIDPart(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}
