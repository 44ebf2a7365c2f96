package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// queueClient reaches the batcher's AdminService.
type queueClient struct {
	addr, tokenFile, caFile, certFile, keyFile string

	admin v1.AdminServiceClient
	conn  *grpc.ClientConn
	token string
}

func (q *queueClient) register(fs *flag.FlagSet) {
	fs.StringVar(&q.addr, "batcher", "", "the batcher's gRPC address (AdminService)")
	fs.StringVar(&q.tokenFile, "token-file", "", "file holding the admin token (default: $INGESTQ_ADMIN_TOKEN)")
	fs.StringVar(&q.caFile, "cacert", "", "PEM CA bundle to trust: turns TLS on (the services' INGESTQ_TLS_CERT)")
	fs.StringVar(&q.certFile, "cert", "", "PEM client certificate for mutual TLS (INGESTQ_TLS_CLIENT_CA)")
	fs.StringVar(&q.keyFile, "key", "", "PEM private key of -cert")
}

// callTimeout bounds every call to the batcher.
const callTimeout = 30 * time.Second

func (q *queueClient) dial() error {
	q.token = os.Getenv("INGESTQ_ADMIN_TOKEN")
	if q.tokenFile != "" {
		b, err := os.ReadFile(q.tokenFile)
		if err != nil {
			return fmt.Errorf("-token-file: %w", err)
		}
		q.token = strings.TrimSpace(string(b))
	}
	creds := insecure.NewCredentials()
	if q.caFile != "" {
		pem, err := os.ReadFile(q.caFile)
		if err != nil {
			return fmt.Errorf("-cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-cacert %s: no PEM certificate", q.caFile)
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
		if q.certFile != "" {
			cert, err := tls.LoadX509KeyPair(q.certFile, q.keyFile)
			if err != nil {
				return fmt.Errorf("-cert/-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(q.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("-batcher %s: %w", q.addr, err)
	}
	q.conn, q.admin = conn, v1.NewAdminServiceClient(conn)
	return nil
}

func (q *queueClient) close() {
	if q.conn != nil {
		q.conn.Close()
	}
}

// call gives a call its deadline and the admin token.
func (q *queueClient) call(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	if q.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+q.token)
	}
	return ctx, cancel
}

func (q *queueClient) getQueue(ctx context.Context) (*v1.GetQueueResponse, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	resp, err := q.admin.GetQueue(ctx, &v1.GetQueueRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetQueue: %w", err)
	}
	return resp, nil
}

func (q *queueClient) pause(ctx context.Context) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	if _, err := q.admin.PauseQueue(ctx, &v1.PauseQueueRequest{}); err != nil {
		return fmt.Errorf("PauseQueue: %w", err)
	}
	return nil
}

func (q *queueClient) unpause(ctx context.Context) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	if _, err := q.admin.UnpauseQueue(ctx, &v1.UnpauseQueueRequest{}); err != nil {
		return fmt.Errorf("UnpauseQueue: %w", err)
	}
	return nil
}

// busyBatchStates are the states a batcher works a batch in.
var busyBatchStates = []v1.BatchState{v1.BatchState_BATCH_STATE_PENDING, v1.BatchState_BATCH_STATE_PROCESSING,
	v1.BatchState_BATCH_STATE_REPORTING, v1.BatchState_BATCH_STATE_UPDATE_REPORTING}

// inFlight says what is still being worked on: each replica's job steps
// in flight, and each batch a batcher holds. Empty: nothing writes.
func (q *queueClient) inFlight(ctx context.Context) ([]string, error) {
	var busy []string
	cctx, cancel := q.call(ctx)
	workers, err := q.admin.ListWorkers(cctx, &v1.ListWorkersRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ListWorkers: %w", err)
	}
	for _, w := range workers.GetWorkers() {
		for _, j := range w.GetInFlight() {
			busy = append(busy, fmt.Sprintf("%s: job %s", w.GetId(), j.GetJobId()))
		}
	}
	for _, st := range busyBatchStates {
		token := ""
		for pages := 0; ; pages++ {
			if pages > 10000 {
				return nil, errors.New("ListBatches: more than 10,000 pages")
			}
			cctx, cancel := q.call(ctx)
			resp, err := q.admin.ListBatches(cctx, &v1.ListBatchesRequest{Status: st, PageSize: 500, PageToken: token})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("ListBatches: %w", err)
			}
			for _, b := range resp.GetBatches() {
				if b.GetLocked() {
					busy = append(busy, "batch "+b.GetId())
				}
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
	}
	sort.Strings(busy)
	return busy, nil
}

// waitQuiet polls until nothing is in flight, or timeout passes.
func (q *queueClient) waitQuiet(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy, err := q.inFlight(ctx)
		if err != nil {
			return err
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still in flight after %s (-quiet-timeout): %s", timeout, strings.Join(busy, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
