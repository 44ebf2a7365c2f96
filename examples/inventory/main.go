// Command inventory shows how an Inventory service records objects through
// the recorder's RecordingService: it leases a job in Recording, reads the
// stored version's manifest from the URL the lease gives, records it (here: prints one line per file),
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
	"net/http"
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
		if err := handle(ctx, rec, l, token, out); err != nil {
			return err
		}
		if once {
			return nil
		}
	}
	return ctx.Err()
}

// handle records one leased version and ends its lease.
func handle(ctx context.Context, rec v1.RecordingServiceClient, l *v1.LeaseResponse, token string, out io.Writer) error {
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
	if err := record(ctx, l, token, out); err != nil {
		_, ferr := rec.Fail(ctx, &v1.FailRequest{LeaseId: l.GetLeaseId(), Message: "inventory: " + err.Error()})
		return ferr
	}
	_, err := rec.Complete(ctx, &v1.CompleteRequest{LeaseId: l.GetLeaseId()})
	return err
}

// record fetches the version manifest from the URL the lease gives (as an
// inventory on another host does) and "records" each file. A real
// inventory writes its database here.
func record(ctx context.Context, l *v1.LeaseResponse, token string, out io.Writer) error {
	if l.GetFetchUrl() == "" {
		return fmt.Errorf("the lease gives no fetch_url for %s (is the recorder serving its store?)", l.GetManifestUrl())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.GetFetchUrl(), nil)
	if err != nil {
		return err
	}
	// A presigned URL (it expires) carries its own authorization; the
	// recorder's endpoint wants the admin token.
	if l.GetFetchExpires() == nil && token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the manifest: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching the manifest of %s: %s", l.GetManifestUrl(), resp.Status)
	}
	m, err := checkm.Parse(resp.Body, checkm.Limits{})
	if err != nil {
		return fmt.Errorf("manifest %s: %w", l.GetManifestUrl(), err)
	}
	fmt.Fprintf(out, "%s version %d (%s, %s, %q): %d files, %d bytes\n", l.GetArk(), l.GetVersion(), l.GetCollection(), l.GetProfile(),
		l.GetErc().GetWhat(), l.GetFileCount(), l.GetTotalSize())
	for _, e := range m.Entries {
		fmt.Fprintf(out, "%s %s %s %d %s:%s\n", l.GetArk(), l.GetMode(), e.FileName, e.FileSize, e.HashAlgorithm, e.HashValue)
	}
	return nil
}
