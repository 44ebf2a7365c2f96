// Package badinput feeds the running pipeline hostile and broken input and
// proves, case by case, that the user gets a precise error (a gRPC status,
// or a batch's or job's status message naming the file, URL, line, or what
// was expected and what came) and that nothing is left half-written: the
// batch and its jobs end in the right state, unlocked, with nothing stored
// or recorded for them and no partial file in the working storage. It also
// proves the access controls: TLS on every gRPC port, mutual TLS, admin
// tokens, and ZooKeeper digest ACLs that leave the queue read-only to
// anyone without the credentials.
//
// The seven services run as processes from their built binaries (e2e/stack)
// on one real ZooKeeper. One stack serves most cases; the cases that need
// another configuration (a deny list with loopback, TLS, mutual TLS,
// ZooKeeper digest ACLs) start their own on the same ZooKeeper under
// another root.
package badinput

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/zktest"
)

const adminToken = "badinput-admin-token"

// Limits the main stack runs with, small so that the cases that hit them
// stay quick. The tests name them in what they expect.
const (
	headerTimeout    = 2 * time.Second // INGESTQ_FETCH_HEADER_TIMEOUT
	idleTimeout      = 2 * time.Second // INGESTQ_FETCH_IDLE_TIMEOUT
	maxFileBytes     = 8 << 20         // INGESTQ_DOWNLOAD_MAX_FILE_BYTES
	unpackMaxBytes   = 16 << 20        // INGESTQ_UNPACK_MAX_BYTES
	unpackMaxFiles   = 1000            // INGESTQ_UNPACK_MAX_ENTRIES
	downloadAttempts = 2               // INGESTQ_DOWNLOAD_ATTEMPTS
)

// mainEnv is the main stack's configuration beside the stack's own.
func mainEnv() map[string]string {
	return map[string]string{
		"INGESTQ_FETCH_HEADER_TIMEOUT":    headerTimeout.String(),
		"INGESTQ_FETCH_IDLE_TIMEOUT":      idleTimeout.String(),
		"INGESTQ_DOWNLOAD_ATTEMPTS":       fmt.Sprint(downloadAttempts),
		"INGESTQ_DOWNLOAD_BACKOFF":        "100ms",
		"INGESTQ_DOWNLOAD_BACKOFF_MAX":    "200ms",
		"INGESTQ_DOWNLOAD_MAX_FILE_BYTES": fmt.Sprint(maxFileBytes),
		"INGESTQ_UNPACK_MAX_BYTES":        fmt.Sprint(unpackMaxBytes),
		"INGESTQ_UNPACK_MAX_ENTRIES":      fmt.Sprint(unpackMaxFiles),
		"INGESTQ_MANIFEST_ATTEMPTS":       "2",
		"INGESTQ_MANIFEST_BACKOFF":        "100ms",
		"INGESTQ_PROVISION_RETRY":         "1s",
	}
}

// suite is what every test shares: the built binaries, the ZooKeeper every
// stack runs on, the depositor's server for well-formed payloads, the
// hostile server, and the main pipeline.
type suite struct {
	dir      string
	bin      string
	profiles string
	zk       *zktest.Server
	deposits *depositor.Server
	hostile  *hostileServer
	main     *pipeline
}

var shared *suite // set once by TestMain, read by the tests

func TestMain(m *testing.M) {
	testenv.Isolate()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := testenv.MkdirTemp("ingestq-badinput-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s := &suite{dir: dir, bin: filepath.Join(dir, "bin"), profiles: filepath.Join(dir, "profiles")}
	if err := s.start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "badinput:", err)
		s.stop()
		fmt.Fprintln(os.Stderr, "badinput: logs and data kept in", dir)
		return 1
	}
	shared = s
	code := m.Run()
	// What the whole suite left behind: nothing locked, fsck clean, no
	// worker entry once the services have stopped.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := errors.Join(s.main.stopAndCheck(ctx), s.stop()); err != nil {
		fmt.Fprintln(os.Stderr, "badinput: at the end of the suite:", err)
		code = 1
	}
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "badinput: logs and data kept in", dir)
	}
	return code
}

// start builds the services and starts ZooKeeper, the servers payloads
// come from and the main pipeline.
func (s *suite) start(ctx context.Context) error {
	if err := stack.Build(ctx, filepath.Join("..", ".."), s.bin); err != nil {
		return err
	}
	if err := writeProfiles(s.profiles); err != nil {
		return err
	}
	var err error
	if s.zk, err = zktest.Start(ctx, filepath.Join(s.dir, "zookeeper"), zktest.Options{NoSync: true}); err != nil {
		return err
	}
	depositDir := filepath.Join(s.dir, "deposits")
	if err := os.MkdirAll(depositDir, 0o755); err != nil {
		return err
	}
	if s.deposits, err = depositor.Start(depositDir); err != nil {
		return err
	}
	s.hostile = startHostileServer()
	s.main, err = s.startPipeline(ctx, "main", pipelineOptions{env: mainEnv()})
	return err
}

// stop stops whatever start started.
func (s *suite) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if s.main != nil {
		err = s.main.close(ctx)
	}
	if s.hostile != nil {
		s.hostile.Close()
	}
	if s.deposits != nil {
		s.deposits.Close()
	}
	if s.zk != nil {
		s.zk.Stop()
	}
	return err
}

// Profiles of the suite's stacks: demo for most cases, held for the
// collection that the admin cases keep on hold.
const (
	demoProfile    = "demo"
	heldProfile    = "held"
	heldCollection = "badheld"
)

func writeProfiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	profiles := map[string]string{
		"demo.yaml": "name: demo\ncollection: demo\nowner: ark:/99999/fk4owner\nnotification_addresses: [depositor@example.org]\n",
		"held.yaml": "name: held\ncollection: " + heldCollection + "\nnotification_addresses: [held@example.org]\n",
	}
	for name, body := range profiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}
