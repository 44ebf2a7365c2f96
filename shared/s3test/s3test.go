// Package s3test starts a real S3-compatible server for tests: the Versity
// S3 Gateway (versitygw) on a free loopback port, serving a folder. `make
// versitygw` (a prerequisite of make test) installs the pinned version
// into bin/.tools; INGESTQ_VERSITYGW names another binary.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/s3store"
)

// EnvBinary names a versitygw binary to use instead of bin/.tools'.
const EnvBinary = "INGESTQ_VERSITYGW"

// Server is a running gateway.
type Server struct {
	Endpoint string // http://127.0.0.1:N
	Access   string
	Secret   string
	Region   string
	// Dir is the folder it serves: a bucket is a folder in it.
	Dir string
	// PID is the gateway's process (what it costs is measured by it).
	PID int
}

// Binary finds the versitygw binary: EnvBinary, or bin/.tools/versitygw@*
// in the repository holding the working directory.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			found, _ := filepath.Glob(filepath.Join(dir, "bin", ".tools", "versitygw@*"))
			if len(found) == 0 {
				return "", fmt.Errorf("s3test: no versitygw in %s: run make versitygw (or set %s)", filepath.Join(dir, "bin", ".tools"), EnvBinary)
			}
			slices.Sort(found)
			return found[len(found)-1], nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("s3test: no go.work above the working directory to find bin/.tools/versitygw in: set %s", EnvBinary)
		}
		dir = parent
	}
}

// Start starts a gateway serving a fresh folder; the test's cleanup stops
// it. What it logged is shown when the test fails.
func Start(t testing.TB) *Server {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "versitygw.log")
	s, stop, err := Run(context.Background(), t.TempDir(), logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			if data, err := os.ReadFile(logPath); err == nil && len(data) > 0 {
				t.Logf("versitygw log:\n%s", data)
			}
		}
	})
	return s
}

// Run starts a gateway serving dir, its output written to logPath, and
// returns it with the function that stops it: for the tests (Start), and
// for `make up STORE=s3`, which keeps it running beside the stack.
func Run(ctx context.Context, dir, logPath string) (*Server, func(), error) {
	bin, err := Binary()
	if err != nil {
		return nil, nil, err
	}
	// The gateway's port stays reserved until it is stopped.
	reserved := freeport.Reserve()
	serving := false
	defer func() {
		if !serving {
			reserved.Close()
		}
	}()
	addrs, err := reserved.Take(1)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	s := &Server{Endpoint: "http://" + addrs[0].String(), Access: "ingestq-test", Secret: "ingestq-test-secret-" + randomHex(8),
		Region: "us-east-1", Dir: dir}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	defer logFile.Close()
	// --keep-alive: the gateway closes every connection after its answer
	// otherwise, so each request connects anew, as no S3 service makes its
	// clients do.
	cmd := exec.Command(bin, "--access", s.Access, "--secret", s.Secret, "--region", s.Region,
		"--port", addrs[0].String(), "--quiet", "--keep-alive", "posix", s.Dir)
	// The root credentials go on the command line, not in the environment:
	// the gateway would also read AWS variables a developer has set.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.Dir}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("s3test: starting %s: %w", bin, err)
	}
	s.PID = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Kill()
		err := <-exited
		exited <- err
		reserved.Close()
	}
	// Up once it accepts connections: the listener opens after the
	// backend is ready.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addrs[0].String(), time.Second)
		if err == nil {
			c.Close()
			serving = true
			return s, stop, nil
		}
		select {
		case err := <-exited:
			exited <- err
			data, _ := os.ReadFile(logPath)
			return nil, nil, fmt.Errorf("s3test: versitygw exited before serving (%v):\n%s", err, data)
		case <-ctx.Done():
			stop()
			return nil, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("s3test: versitygw not serving on %s after 30 s", addrs[0])
		}
	}
}

// Settings are the store settings of a bucket on the server.
func (s *Server) Settings(bucket string) s3store.Settings {
	return s3store.Settings{Endpoint: s.Endpoint, Region: s.Region, Bucket: bucket, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s.Access, s.Secret, "")}
}

// Client is a client of the server.
func (s *Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	c, err := s3store.Client(context.Background(), s.Settings("unused"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CreateBucket makes a bucket with a fresh name and returns the name.
func (s *Server) CreateBucket(t testing.TB) string {
	t.Helper()
	name := "ingestq-" + randomHex(6)
	if err := s.MakeBucket(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// MakeBucket makes the bucket name.
func (s *Server) MakeBucket(ctx context.Context, name string) error {
	c, err := s3store.Client(ctx, s.Settings(name))
	if err != nil {
		return err
	}
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("s3test: creating bucket %s: %w", name, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(errors.Join(errors.New("s3test: no randomness"), err))
	}
	return hex.EncodeToString(b)
}

// StandIn serves h on a loopback port until the test ends and returns its
// endpoint: a stand-in for a store that misbehaves as a real one cannot be
// made to (stalls, endless listings).
func StandIn(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// StandInClient is a client of the stand-in at endpoint: bucket b, one
// attempt a request, test credentials; change, if not nil, adjusts the
// settings first.
func StandInClient(t testing.TB, endpoint string, change func(*s3store.Settings)) *s3.Client {
	t.Helper()
	settings := s3store.Settings{Endpoint: endpoint, Region: "us-east-1", Bucket: "b", PathStyle: true,
		Retry:       retry.Policy{Attempts: 1},
		Credentials: credentials.NewStaticCredentialsProvider("ingestq-test", "ingestq-test-secret", "")}
	if change != nil {
		change(&settings)
	}
	c, err := s3store.Client(context.Background(), settings)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
