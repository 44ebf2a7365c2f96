// Command ingestq-backup backs up a running ingestq and restores it onto
// fresh servers (docs/backup.md).
//
//	ingestq-backup create  -batcher HOST:PORT -zk-servers … -zk-data DIR [-zk-datalog DIR]
//	                       [-inventory FILE] [-work DIR] [-store DIR] -out DIR
//	ingestq-backup restore -from DIR -zk-data DIR [-zk-datalog DIR]
//	                       [-inventory FILE] [-work DIR] [-store DIR] [-parts …]
//
// create pauses the queue (AdminService/PauseQueue) and waits until no job
// step and no batch is in flight, so that nothing writes; copies one
// ZooKeeper server's snapshot and transaction logs once every server
// reports the same last transaction; takes an online backup of the
// recorder's SQLite inventory; links (or copies) the working storage and
// the local object store; and unpauses the queue. Every part is of the
// same moment. restore lays the parts out for servers that have not
// started yet; the restored queue starts paused.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ingestq-backup:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  ingestq-backup create  -batcher HOST:PORT -zk-servers HOST:PORT,... -zk-data DIR [-zk-datalog DIR]
                         [-inventory FILE] [-work DIR] [-store DIR] -out DIR
  ingestq-backup restore -from DIR -zk-data DIR [-zk-datalog DIR]
                         [-inventory FILE] [-work DIR] [-store DIR] [-parts zookeeper,...]
(docs/backup.md; -h after a command lists its flags)`

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "create":
		return runCreate(ctx, args[1:], out)
	case "restore":
		return runRestore(args[1:], out)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

// parts are the paths of what is backed up or restored; an empty one is
// left out.
type parts struct {
	zkData, zkDatalog, inventory, work, store string
}

func (p *parts) register(fs *flag.FlagSet) {
	fs.StringVar(&p.zkData, "zk-data", "", "a ZooKeeper server's dataDir (its snapshots, and its transaction logs unless -zk-datalog)")
	fs.StringVar(&p.zkDatalog, "zk-datalog", "", "the server's dataLogDir, when its transaction logs are kept apart (ZOO_DATA_LOG_DIR)")
	fs.StringVar(&p.inventory, "inventory", "", "the recorder's SQLite inventory (INGESTQ_INVENTORY_DB); empty: none (an external inventory)")
	fs.StringVar(&p.work, "work", "", "the working storage (INGESTQ_WORK_ROOT)")
	fs.StringVar(&p.store, "store", "", "the local object store (INGESTQ_STORE_ROOT); empty with the S3 store (docs/backup.md)")
}

func runCreate(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	var p parts
	p.register(fs)
	var q queueClient
	q.register(fs)
	zkServers := fs.String("zk-servers", "", "every ZooKeeper server of the ensemble, comma-separated host:port (their srvr answers must agree)")
	dest := fs.String("out", "", "directory to write the backup to (new, or empty)")
	quietTimeout := fs.Duration("quiet-timeout", 10*time.Minute, "longest wait for the job steps and batches in flight to end once the queue is paused")
	link := fs.Bool("link", true, "hard-link files of the working storage and the store into the backup when on the same file system (they are written once, never changed in place); false copies them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("create: unexpected argument %q", fs.Arg(0))
	case q.addr == "":
		return errors.New("create: -batcher is required: the queue is paused for the backup")
	case *zkServers == "" || p.zkData == "":
		return errors.New("create: -zk-servers and -zk-data are required")
	case *dest == "":
		return errors.New("create: -out is required")
	}
	if err := emptyOrMissing(*dest); err != nil {
		return fmt.Errorf("create: -out: %w", err)
	}
	return create(ctx, createOptions{queue: &q, zkServers: splitList(*zkServers), parts: p, out: *dest,
		quietTimeout: *quietTimeout, link: *link}, out)
}

func runRestore(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	var p parts
	p.register(fs)
	from := fs.String("from", "", "a backup made by ingestq-backup create")
	only := fs.String("parts", "", "restore only these parts, comma-separated (zookeeper, inventory, work, store): e.g. zookeeper on each server of an ensemble; empty: every part the backup holds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("restore: unexpected argument %q", fs.Arg(0))
	case *from == "":
		return errors.New("restore: -from is required")
	}
	return restore(*from, p, splitList(*only), out)
}
