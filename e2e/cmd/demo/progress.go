package main

import (
	"context"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// bearer sends the admin token, when there is one, with every call.
func bearer(token string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// demo submits the example deposit, shows its progress and prints the report.
func demo(ctx context.Context, out io.Writer, s *stack.Stack, dep *depositor.Server, token string, stored storedObjects) error {
	conn, err := grpc.NewClient(s.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(bearer(token)))
	if err != nil {
		return err
	}
	defer conn.Close()
	batches, admin := v1.NewBatchServiceClient(conn), v1.NewAdminServiceClient(conn)
	sub, err := batches.Submit(ctx, &v1.SubmitRequest{
		Submitter:   "demo",
		Profile:     "demo",
		PayloadUrl:  dep.URL + "/batch.checkm",
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
		Metadata:    &v1.Metadata{Who: "Hale family", What: "Hale family papers", When: "1880-1944"},
	})
	if err != nil {
		return fmt.Errorf("submitting: %w", err)
	}
	fmt.Fprintf(out, "\nSubmitted %s/batch.checkm as batch %s (uuid %s, trace %s)\n\n", dep.URL, sub.GetBatchId(), sub.GetBatchUuid(), traceID(sub.GetTraceparent()))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	bar := newProgress(out)
	var batch *v1.Batch
	var jobs []*v1.Job
	for {
		st, err := batches.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: sub.GetBatchId()}})
		if err != nil {
			return fmt.Errorf("reading batch %s: %w", sub.GetBatchId(), err)
		}
		batch = st.GetBatch()
		if jobs, err = listJobs(ctx, admin, sub.GetBatchId()); err != nil {
			return err
		}
		bar.show(batch, jobs)
		if reported(batch) {
			break
		}
		select {
		case <-ctx.Done():
			bar.done()
			return fmt.Errorf("batch %s not reported in time: %w", sub.GetBatchId(), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	bar.done()
	printReport(out, s, batch, jobs, stored)
	return nil
}

// reported: the batch has had its report (Completed, or Failed after Reporting).
func reported(b *v1.Batch) bool {
	switch b.GetStatus().GetStatus() {
	case queue.BatchCompleted:
		return true
	case queue.BatchFailed:
		return b.GetStatusReport() != nil || b.GetCounts().GetProcessing()+b.GetCounts().GetCompleted()+b.GetCounts().GetFailed() == 0
	}
	return false
}

func listJobs(ctx context.Context, admin v1.AdminServiceClient, bid string) ([]*v1.Job, error) {
	var out []*v1.Job
	token := ""
	for {
		resp, err := admin.ListJobs(ctx, &v1.ListJobsRequest{BatchId: bid, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("listing jobs of %s: %w", bid, err)
		}
		out = append(out, resp.GetJobs()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// progress draws jobs per state and a bar: refreshed in place on a
// terminal, a plain line per change otherwise.
type progress struct {
	out  io.Writer
	tty  bool
	last string
}

func newProgress(out io.Writer) *progress {
	f, ok := out.(*os.File)
	tty := false
	if ok {
		if fi, err := f.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{out: out, tty: tty}
}

func (p *progress) show(b *v1.Batch, jobs []*v1.Job) {
	counts := map[queue.JobState]int{}
	for _, j := range jobs {
		counts[j.GetStatus().GetStatus()]++
	}
	var parts []string
	for _, s := range queue.JobStates() {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", queue.JobStateName(s), n))
		}
	}
	ended := counts[queue.Completed] + counts[queue.Failed] + counts[queue.Deleted]
	const width = 24
	filled := 0
	if len(jobs) > 0 {
		filled = width * ended / len(jobs)
	}
	line := fmt.Sprintf("batch %-10s [%s%s] %d/%d  %s", queue.BatchStateName(b.GetStatus().GetStatus()),
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), ended, len(jobs), strings.Join(parts, ", "))
	if line == p.last {
		return
	}
	p.last = line
	if p.tty {
		fmt.Fprintf(p.out, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.out, line)
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprintln(p.out)
	}
}

// storedObjects says where the stored objects are, and how many.
type storedObjects func() (where string, n int)

// storedIn counts the objects of a folder holding one folder each (the
// local store's, or the S3 server's folder of the bucket).
func storedIn(dir string) storedObjects {
	return func() (string, int) { return dir, countDirs(dir) }
}

// printReport says how the batch ended and where everything went.
func printReport(out io.Writer, s *stack.Stack, b *v1.Batch, jobs []*v1.Job, stored storedObjects) {
	fmt.Fprintf(out, "\nBatch %s: %s", b.GetId(), queue.BatchStateName(b.GetStatus().GetStatus()))
	if m := b.GetStatus().GetMessage(); m != "" {
		fmt.Fprintf(out, " (%s)", m)
	}
	fmt.Fprintln(out)
	slices.SortFunc(jobs, func(a, b *v1.Job) int { return strings.Compare(a.GetId(), b.GetId()) })
	for _, j := range jobs {
		fmt.Fprintf(out, "  %s  %-10s %-26s %-18s %s\n", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus()),
			j.GetIdentifiers().GetPrimaryId(), strings.Join(j.GetIdentifiers().GetLocalId(), ","), j.GetStatus().GetMessage())
	}
	if r := b.GetStatusReport(); r != nil {
		failed, successful := queue.ReportTotals(r)
		fmt.Fprintf(out, "status-report: %d successful, %d failed\n", successful, failed)
	}
	emails, _ := filepath.Glob(filepath.Join(s.OutboxDir, "*"))
	fmt.Fprintf(out, "\nWhere things are:\n")
	where, n := stored()
	fmt.Fprintf(out, "  stored objects   %s (%d objects)\n", where, n)
	fmt.Fprintf(out, "  inventory        %s (SQLite; e.g. sqlite3 %s 'select * from versions')\n", s.InventoryDB, s.InventoryDB)
	fmt.Fprintf(out, "  emails           %s (%d messages)\n", s.OutboxDir, len(emails))
	fmt.Fprintf(out, "  service logs     %s\n", s.LogDir)
	for _, e := range emails {
		if strings.Contains(filepath.Base(e), b.GetId()) && strings.Contains(filepath.Base(e), "report") {
			if text, err := readEmail(e); err == nil {
				fmt.Fprintf(out, "\nThe report email (%s):\n%s\n", e, indent(text))
			}
		}
	}
}

// readEmail renders an .eml file for a terminal: its main headers and its
// decoded text.
func readEmail(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	msg, err := mail.ReadMessage(f)
	if err != nil {
		return "", err
	}
	body := io.Reader(msg.Body)
	if strings.EqualFold(msg.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
		body = quotedprintable.NewReader(body)
	}
	text, err := io.ReadAll(body)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("To: %s\nSubject: %s\n\n%s", msg.Header.Get("To"), msg.Header.Get("Subject"), text), nil
}

// countDirs counts the folders in dir, hidden ones (the S3 server's own)
// left out.
func countDirs(dir string) int {
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// traceID is the trace id part of a W3C traceparent.
func traceID(traceparent string) string {
	if parts := strings.Split(traceparent, "-"); len(parts) == 4 {
		return parts[1]
	}
	return "none"
}
