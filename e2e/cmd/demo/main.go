// Command demo runs the whole pipeline on this machine: a ZooKeeper of its
// own and the seven services as separate processes, a depositor's web server
// serving examples/demo, one submission, live progress, the batch report, and
// a clean stop (`make demo`). With -up it starts the same stack and keeps it
// running until Ctrl-C, printing each service's address and grpcurl examples
// (`make up`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
)

func main() {
	bin := flag.String("bin", "bin", "directory of the service binaries (make build)")
	examples := flag.String("examples", "examples", "the examples directory (profiles and the demo deposit)")
	runDir := flag.String("run", "run", "directory for the run's data (a new subdirectory per run)")
	up := flag.Bool("up", false, "start the stack and keep it running until Ctrl-C")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *bin, *examples, *runDir, *up); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, bin, examples, runRoot string, up bool) (err error) {
	dir, err := filepath.Abs(filepath.Join(runRoot, time.Now().Format("20060102-150405")))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	absBin, _ := filepath.Abs(bin)
	profiles, _ := filepath.Abs(filepath.Join(examples, "profiles"))
	fmt.Fprintf(out, "Starting ZooKeeper and the seven services (data and logs in %s) ...\n", dir)
	s, err := stack.Start(ctx, stack.Options{Dir: dir, BinDir: absBin, ProfilesDir: profiles})
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
	if up {
		printAddresses(out, s, dep)
		<-ctx.Done()
		return nil
	}
	return demo(ctx, out, s, dep)
}

func printAddresses(out io.Writer, s *stack.Stack, dep *depositor.Server) {
	fmt.Fprintln(out, "\nThe stack is up (Ctrl-C stops it):")
	for _, name := range stack.Services {
		for _, p := range s.Procs(name) {
			fmt.Fprintf(out, "  %-12s gRPC %-21s metrics http://%s/metrics\n", name, p.Addr, p.Metrics)
		}
	}
	fmt.Fprintf(out, "  ZooKeeper    %v (root %s)\n  depositor    %s (serves examples/demo)\n", s.Servers, s.Root, dep.URL)
	fmt.Fprintf(out, "  console      http://%s/ (the operator console in a browser)\n\n", s.Procs("batcher")[0].Console)
	b := s.Addr("batcher")
	fmt.Fprintf(out, "Try:\n")
	fmt.Fprintf(out, "  grpcurl -plaintext -d '{\"submitter\":\"me\",\"profile\":\"demo\",\"payload_url\":\"%s/batch.checkm\",\"payload_type\":\"PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS\"}' %s ingestq.v1.BatchService/Submit\n", dep.URL, b)
	fmt.Fprintf(out, "  grpcurl -plaintext %s ingestq.v1.AdminService/GetQueue\n", b)
	fmt.Fprintf(out, "  grpcurl -plaintext -d '{\"state\":\"JOB_STATE_FAILED\"}' %s ingestq.v1.AdminService/ListJobs\n", b)
	fmt.Fprintf(out, "  grpcurl -plaintext %s ingestq.v1.StageService/GetStatus\n", s.Addr("downloader"))
	fmt.Fprintf(out, "  grpcurl -plaintext %s list\n\n", b)
}
