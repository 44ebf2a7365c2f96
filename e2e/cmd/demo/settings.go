package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/services/console/web"
	"github.com/ingestq/ingestq/shared/config"
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
	// The console is where its docs say it is, unless the caller says
	// (the stack would give it a free port).
	if _, set := opts.Env["INGESTQ_CONSOLE_LISTEN"]; !set {
		opts.Env["INGESTQ_CONSOLE_LISTEN"] = web.DefaultListen
	}
	if zk := opts.Env["INGESTQ_ZK_SERVERS"]; zk != "" {
		opts.ZooKeeper = strings.Split(zk, ",")
	}
	opts.Root = opts.Env["INGESTQ_ZK_ROOT"]
	token = opts.Env["INGESTQ_ADMIN_TOKEN"]
	if file := opts.Env["INGESTQ_ADMIN_TOKEN_FILE"]; file != "" && token == "" {
		if token, err = config.ReadAdminToken(file); err != nil {
			return opts, "", nil, fmt.Errorf("INGESTQ_ADMIN_TOKEN_FILE: %w", err)
		}
	}
	return opts, token, ignored, nil
}
