// Command inventory shows how an Inventory service records objects through
// the recorder's RecordingService: it leases a job in Recording, reads the
// stored version's manifest, records it (here: prints one line per file),
// and completes the lease, or fails it with the reason. A long recording
// renews its lease on the way.
//
//	INGESTQ_ADMIN_TOKEN=… go run . -recorder 127.0.0.1:7406
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"os/signal"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

func main() {
	addr := flag.String("recorder", "127.0.0.1:7406", "the recorder's gRPC address")
	once := flag.Bool("once", false, "record one job, then exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, os.Getenv("INGESTQ_ADMIN_TOKEN"), *once, os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// leaseDuration is asked for each lease; the loop renews at a third of it.
const leaseDuration = 2 * time.Minute

// run leases and records jobs until ctx ends (or after one with once).
func run(ctx context.Context, addr, token string, once bool, out io.Writer) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	rec := v1.NewRecordingServiceClient(conn)
	for ctx.Err() == nil {
		l, err := rec.Lease(ctx, &v1.LeaseRequest{Wait: durationpb.New(30 * time.Second), LeaseDuration: durationpb.New(leaseDuration)})
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		if l.GetLeaseId() == "" {
			continue // nothing to record yet
		}
		if err := handle(ctx, rec, l, out); err != nil {
			return err
		}
		if once {
			return nil
		}
	}
	return ctx.Err()
}

// handle records one leased version and ends its lease.
func handle(ctx context.Context, rec v1.RecordingServiceClient, l *v1.LeaseResponse, out io.Writer) error {
	workCtx, done := context.WithCancel(ctx)
	defer done()
	go func() {
		t := time.NewTicker(leaseDuration / 3)
		defer t.Stop()
		for {
			select {
			case <-workCtx.Done():
				return
			case <-t.C:
				if _, err := rec.Renew(workCtx, &v1.RenewRequest{LeaseId: l.GetLeaseId(), LeaseDuration: durationpb.New(leaseDuration)}); err != nil {
					log.Printf("renewing lease of %s: %v", l.GetJobId(), err)
					return
				}
			}
		}
	}()
	if err := record(l, out); err != nil {
		_, ferr := rec.Fail(ctx, &v1.FailRequest{LeaseId: l.GetLeaseId(), Message: "inventory: " + err.Error()})
		return ferr
	}
	_, err := rec.Complete(ctx, &v1.CompleteRequest{LeaseId: l.GetLeaseId()})
	return err
}

// record reads the version manifest and "records" each file. A real
// inventory writes its database here.
func record(l *v1.LeaseResponse, out io.Writer) error {
	u, err := url.Parse(l.GetManifestUrl())
	if err != nil || u.Scheme != "file" {
		return fmt.Errorf("manifest %s: only file:// manifests are read here", l.GetManifestUrl())
	}
	f, err := os.Open(u.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		return fmt.Errorf("manifest %s: %w", l.GetManifestUrl(), err)
	}
	for _, e := range m.Entries {
		fmt.Fprintf(out, "%s %s %s %d %s:%s\n", l.GetArk(), l.GetMode(), e.FileName, e.FileSize, e.HashAlgorithm, e.HashValue)
	}
	return nil
}
