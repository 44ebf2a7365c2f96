package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/ingestq/ingestq/e2e/stack"
)

// perProcess are the settings the stack chooses for each process: seven
// services (and their replicas) cannot share one listen address.
var perProcess = []string{"INGESTQ_LISTEN", "INGESTQ_METRICS_LISTEN"}

// callerSettings makes the stack's options from the caller's environment:
// every INGESTQ_* variable the caller set reaches every service and wins
// over the stack's own value (a ZooKeeper and root given are used instead
// of a server of the stack's own), except the per-process listen addresses,
// which it returns as ignored. token is the admin token the services get
// (from INGESTQ_ADMIN_TOKEN or INGESTQ_ADMIN_TOKEN_FILE), "" for none.
func callerSettings(environ []string) (opts stack.Options, token string, ignored []string, err error) {
	opts.Env = map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, "INGESTQ_") {
			continue
		}
		if slices.Contains(perProcess, k) {
			ignored = append(ignored, k)
			continue
		}
		opts.Env[k] = v
	}
	slices.Sort(ignored)
	if zk := opts.Env["INGESTQ_ZK_SERVERS"]; zk != "" {
		opts.ZooKeeper = strings.Split(zk, ",")
	}
	opts.Root = opts.Env["INGESTQ_ZK_ROOT"]
	token = opts.Env["INGESTQ_ADMIN_TOKEN"]
	if file := opts.Env["INGESTQ_ADMIN_TOKEN_FILE"]; file != "" && token == "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return opts, "", nil, fmt.Errorf("INGESTQ_ADMIN_TOKEN_FILE: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return opts, token, ignored, nil
}
