// Command demo runs the whole pipeline on this machine: a ZooKeeper of its
// own, the seven services and the operator console (on 127.0.0.1:8401
// unless INGESTQ_CONSOLE_LISTEN says otherwise) as separate processes, a
// depositor's web server
// serving examples/demo, one submission, live progress, the batch report, and
// a clean stop (`make demo`). With -up it starts the same stack and keeps it
// running until Ctrl-C, printing each service's address and grpcurl examples
// (`make up`). With -store s3 the stack stores into a bucket of a versitygw
// server of its own, the S3-compatible server the tests use (`make up
// STORE=s3`, `make demo STORE=s3`); with -store merritt into a node of a
// stand-in for Merritt's storage service that the run starts, the one the
// tests use (`make demo STORE=merritt`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/s3test"
)

func main() {
	bin := flag.String("bin", "bin", "directory of the service binaries (make build)")
	examples := flag.String("examples", "examples", "the examples directory (profiles and the demo deposit)")
	runDir := flag.String("run", "run", "directory for the run's data (a new subdirectory per run)")
	up := flag.Bool("up", false, "start the stack and keep it running until Ctrl-C")
	store := flag.String("store", "local", "the object store: local (a folder of the run), s3 (a bucket of a versitygw server the run starts; make versitygw installs it) or merritt (a node of a stand-in for Merritt's storage service the run starts)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, os.Environ(), *bin, *examples, *runDir, *up, *store); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, environ []string, bin, examples, runRoot string, up bool, store string) (err error) {
	if store != "local" && store != "s3" && store != "merritt" {
		return fmt.Errorf("-store %q: want local, s3 or merritt", store)
	}
	opts, token, ignored, err := callerSettings(environ)
	if err != nil {
		return err
	}
	for _, k := range ignored {
		fmt.Fprintf(out, "Ignoring %s: the stack gives each of its processes an address of its own.\n", k)
	}
	dir, err := filepath.Abs(filepath.Join(runRoot, time.Now().Format("20060102-150405")))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var stored storedObjects
	switch store {
	case "s3":
		s3, stop, err := startS3(ctx, dir, opts.Env)
		if err != nil {
			return err
		}
		defer stop()
		fmt.Fprintf(out, "S3 store: versitygw at %s, bucket %s (its folder %s)\n", s3.Endpoint, s3Bucket, filepath.Join(s3.Dir, s3Bucket))
		stored = storedIn(filepath.Join(s3.Dir, s3Bucket))
	case "merritt":
		svc, err := startMerritt(opts.Env)
		if err != nil {
			return err
		}
		defer svc.Close()
		fmt.Fprintf(out, "Merritt store: node %d of a stand-in for Merritt's storage service at %s\n", merrittNode, svc.URL)
		stored = func() (string, int) {
			return fmt.Sprintf("node %d of the storage service at %s", merrittNode, svc.URL), len(svc.Objects(merrittNode))
		}
	}
	absBin, _ := filepath.Abs(bin)
	profiles, _ := filepath.Abs(filepath.Join(examples, "profiles"))
	fmt.Fprintf(out, "Starting ZooKeeper, the seven services and the console (data and logs in %s) ...\n", dir)
	opts.Dir, opts.BinDir, opts.ProfilesDir = dir, absBin, profiles
	// A lease carries a fetch_url: the recorder serves the local store's
	// versions, as an inventory on another host would fetch them.
	opts.ServeVersions = true
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "Stopping the services and ZooKeeper ...")
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		if stopErr := s.Stop(stopCtx); stopErr != nil {
			err = errors.Join(err, stopErr)
		} else {
			fmt.Fprintln(out, "Stopped; nothing left running.")
		}
	}()
	dep, err := depositor.Start(filepath.Join(examples, "demo"))
	if err != nil {
		return err
	}
	defer dep.Close()
	if stored == nil {
		stored = storedIn(s.StoreRoot)
	}
	if up {
		printAddresses(out, s, dep, tokenWord(opts.Env, token))
		printWhere(out, s, opts.Env, tokenWord(opts.Env, token), stored, store == "local")
		<-ctx.Done()
		return nil
	}
	if addr := s.ConsoleAddr(); addr != "" {
		fmt.Fprintf(out, "The operator console shows it at http://%s/ while the demo runs.\n", addr)
	}
	return demo(ctx, out, s, dep, token, stored)
}

// merrittNode is the storage node of the stack's Merritt store.
const merrittNode = 9501

// startMerritt starts the stand-in for Merritt's storage service the
// tests use and points every service's store at one of its nodes (env:
// the stack's settings; the caller's INGESTQ_STORE and INGESTQ_MERRITT_*
// give way). Each processor serves the versions it prepares on an address
// of its own (stack.Proc.Serve).
func startMerritt(env map[string]string) (*merritttest.Service, error) {
	svc, err := merritttest.Run(merrittNode)
	if err != nil {
		return nil, err
	}
	maps.Copy(env, map[string]string{"INGESTQ_STORE": "merritt", "INGESTQ_MERRITT_STORAGE_URL": svc.URL,
		"INGESTQ_MERRITT_NODE": strconv.Itoa(merrittNode)})
	return svc, nil
}

// s3Bucket is the bucket of the stack's S3 store.
const s3Bucket = "ingestq"

// startS3 starts the S3-compatible server the tests use, serving a folder
// of the run, makes the stack's bucket, and points every service's store at
// it (env: the stack's settings; the caller's INGESTQ_STORE and INGESTQ_S3_*
// give way).
func startS3(ctx context.Context, dir string, env map[string]string) (*s3test.Server, func(), error) {
	s3, stop, err := s3test.Run(ctx, filepath.Join(dir, "s3"), filepath.Join(dir, "s3.log"))
	if err != nil {
		return nil, nil, err
	}
	if err := s3.MakeBucket(ctx, s3Bucket); err != nil {
		stop()
		return nil, nil, err
	}
	maps.Copy(env, map[string]string{
		"INGESTQ_STORE": "s3", "INGESTQ_S3_ENDPOINT": s3.Endpoint, "INGESTQ_S3_BUCKET": s3Bucket,
		"INGESTQ_S3_REGION": s3.Region, "INGESTQ_S3_PATH_STYLE": "true",
		"AWS_ACCESS_KEY_ID": s3.Access, "AWS_SECRET_ACCESS_KEY": s3.Secret,
	})
	return s3, stop, nil
}

// tokenWord is how a shell names the admin token the caller gave ("" for
// none): the variable or the file, so that the token itself is never printed.
func tokenWord(env map[string]string, token string) string {
	switch {
	case token == "":
		return ""
	case env["INGESTQ_ADMIN_TOKEN"] != "":
		return "$INGESTQ_ADMIN_TOKEN"
	}
	return "$(cat " + env["INGESTQ_ADMIN_TOKEN_FILE"] + ")"
}

// printAddresses says what runs where and how to try it. With an admin
// token (named as tokenWord names it) it says how to sign in to the console
// and puts the token in the grpcurl lines of the admin methods.
func printAddresses(out io.Writer, s *stack.Stack, dep *depositor.Server, token string) {
	fmt.Fprintln(out, "\nThe stack is up (Ctrl-C stops it):")
	for _, name := range stack.Services {
		for _, p := range s.Procs(name) {
			fmt.Fprintf(out, "  %-12s gRPC %-21s metrics http://%s/metrics\n", name, p.Addr, p.Metrics)
		}
	}
	for _, p := range s.Procs(stack.Console) {
		fmt.Fprintf(out, "  %-12s gRPC %-21s metrics http://%s/metrics\n", p.Service, p.Addr, p.Metrics)
	}
	fmt.Fprintf(out, "  ZooKeeper    %v (root %s)\n  depositor    %s (serves examples/demo)\n", s.Servers, s.Root, dep.URL)
	fmt.Fprint(out, consoleLines(s.ConsoleAddr(), token))
	b := s.Addr("batcher")
	auth := ""
	if token != "" {
		auth = `-H "authorization: Bearer ` + token + `" `
	}
	fmt.Fprintf(out, "Try:\n")
	if token == "$INGESTQ_ADMIN_TOKEN" {
		fmt.Fprintf(out, "  (in a shell where INGESTQ_ADMIN_TOKEN holds the token this stack was started with)\n")
	}
	fmt.Fprintf(out, "  grpcurl -plaintext -d '{\"submitter\":\"me\",\"profile\":\"demo\",\"payload_url\":\"%s/batch.checkm\",\"payload_type\":\"PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS\"}' %s ingestq.v1.BatchService/Submit\n", dep.URL, b)
	fmt.Fprintf(out, "  grpcurl -plaintext %s%s ingestq.v1.AdminService/GetQueue\n", auth, b)
	fmt.Fprintf(out, "  grpcurl -plaintext %s-d '{\"state\":\"JOB_STATE_FAILED\"}' %s ingestq.v1.AdminService/ListJobs\n", auth, b)
	fmt.Fprintf(out, "  grpcurl -plaintext %s ingestq.v1.StageService/GetStatus\n", s.Addr("downloader"))
	fmt.Fprintf(out, "  grpcurl -plaintext %s list\n\n", b)
}

// printWhere says where the stack keeps what it makes (mail, store,
// inventory, working storage, logs), whether the built-in recorder is on,
// and how an inventory leases the jobs in Recording from this stack's
// recorder, whose lease names where to fetch the version.
func printWhere(out io.Writer, s *stack.Stack, env map[string]string, token string, stored storedObjects, local bool) {
	where, _ := stored()
	builtin := true
	if v, err := strconv.ParseBool(env["INGESTQ_RECORDER_BUILTIN"]); err == nil {
		builtin = v
	}
	fmt.Fprintf(out, "Where things are:\n")
	fmt.Fprintf(out, "  outbox       %s (report mails, as .eml files)\n", s.OutboxDir)
	fmt.Fprintf(out, "  store        %s (stored versions)\n", where)
	if builtin {
		fmt.Fprintf(out, "  inventory    %s (the built-in recorder's SQLite: sqlite3 %s 'select * from versions')\n", s.InventoryDB, s.InventoryDB)
	}
	fmt.Fprintf(out, "  work root    %s (jobs' working folders)\n  logs         %s\n\n", s.WorkRoot, s.LogDir)
	rec := s.Procs("recorder")[0]
	if builtin {
		fmt.Fprintf(out, "Recording: the built-in recorder is on: it records every stored version into the inventory above.\n"+
			"  (INGESTQ_RECORDER_BUILTIN=false make up leaves the jobs in Recording to an inventory's RecordingService client.)\n")
	} else {
		fmt.Fprintf(out, "Recording: the built-in recorder is off (INGESTQ_RECORDER_BUILTIN=false): jobs wait in Recording\n"+
			"  until an inventory leases them from the recorder's RecordingService (examples/inventory is such a client).\n")
	}
	auth := ""
	if token != "" {
		auth = `-H "authorization: Bearer ` + token + `" `
	}
	fmt.Fprintf(out, "  lease one:  grpcurl -plaintext %s-d '{\"wait\":\"30s\",\"lease_duration\":\"120s\"}' %s ingestq.v1.RecordingService/Lease\n", auth, rec.Addr)
	fmt.Fprintf(out, "  complete:   grpcurl -plaintext %s-d '{\"lease_id\":\"<lease_id>\"}' %s ingestq.v1.RecordingService/Complete\n", auth, rec.Addr)
	if rec.Versions != "" && local {
		fmt.Fprintf(out, "  versions    http://%s/versions/ (the local store's versions; a lease's fetch_url is here", rec.Versions)
		if token != "" {
			fmt.Fprintf(out, ", behind the admin token: curl %s<fetch_url>", auth)
		}
		fmt.Fprintf(out, ")\n")
	}
	fmt.Fprintln(out)
}

// consoleLines says where the console is and how to use it.
func consoleLines(addr, token string) string {
	switch {
	case addr == "":
		return "  console      off (INGESTQ_CONSOLE_LISTEN is empty)\n\n"
	case token != "":
		return fmt.Sprintf("  console      http://%s/ (the operator console in a browser)\n"+
			"               sign in at http://%s/signin with the admin token (%s);\n"+
			"               the admin methods below need it too\n\n", addr, addr, token)
	}
	return fmt.Sprintf("  console      http://%s/ (the operator console in a browser; read-only:\n"+
		"               start with INGESTQ_ADMIN_TOKEN=<token> make up to sign in and act)\n\n", addr)
}
