// Command console is ingestq's operator console: the queue, its batches
// and jobs as web pages, with the admin actions one click away. It is a
// client of the public gRPC APIs only: every read and action is a call of
// the batcher's AdminService (sign-ins included, which the batcher keeps in
// the queue's ZooKeeper for every console replica), and the workers'
// controls call each stage replica's StageService.
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/ingestq/ingestq/services/console/web"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/program"
	"github.com/ingestq/ingestq/shared/server"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// settings are the console's own configuration.
type settings struct {
	listen       string
	keyFile      *string
	batcher      string
	stageTimeout *time.Duration
}

func (s *settings) register(r *config.Registry, _ *config.Common) {
	r.Func("console-listen", "INGESTQ_CONSOLE_LISTEN", web.DefaultListen,
		"operator console (HTTP) listen address; read-only without an admin token", setAddress(&s.listen))
	s.keyFile = r.String("console-key-file", "INGESTQ_CONSOLE_KEY_FILE", "",
		"file (a mounted secret, say) holding the key the console signs its sessions with, 32 bytes or more (openssl rand -base64 48); consoles given the same file accept each other's sign-ins, across restarts; empty: a random key per process, whose sign-ins hold on it alone until it restarts")
	r.Func("batcher-addr", "INGESTQ_BATCHER_ADDR", "127.0.0.1:7401",
		"the batcher's gRPC address: the console reads and acts through its AdminService, with the admin token, dialled as the services speak (TLS with INGESTQ_TLS_CERT, trusting INGESTQ_TLS_CLIENT_CA)", setAddress(&s.batcher))
	s.stageTimeout = r.Duration("console-stage-timeout", "INGESTQ_CONSOLE_STAGE_TIMEOUT", web.DefaultStageTimeout,
		"how long the console waits for a stage replica to answer a pause or resume of the workers table")
}

// setAddress accepts host:port.
func setAddress(p *string) func(string) error {
	return func(v string) error {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("%q is not host:port", v)
		}
		*p = v
		return nil
	}
}

func main() {
	var s settings
	program.Main(program.Spec{
		Name:     "console",
		Defaults: config.Defaults{Listen: "127.0.0.1:7408", MetricsListen: "127.0.0.1:9408"},
		Config:   s.register,
		Setup:    s.setup,
	})
}

// setup serves the console on its own port until the drain.
func (s *settings) setup(_ context.Context, env *program.Env) error {
	if *s.stageTimeout <= 0 {
		return fmt.Errorf("INGESTQ_CONSOLE_STAGE_TIMEOUT %s: want a positive duration", *s.stageTimeout)
	}
	var key []byte
	if *s.keyFile != "" {
		k, err := web.ReadSignInKey(*s.keyFile)
		if err != nil {
			return fmt.Errorf("INGESTQ_CONSOLE_KEY_FILE: %w", err)
		}
		key = k
	}
	creds, err := dialCredentials(env.Config.TLS)
	if err != nil {
		return err
	}
	con, err := web.New(web.Options{Batcher: s.batcher, BatcherCredentials: creds, Token: env.Config.AdminToken,
		Logger: env.Logger, SignInKey: key, StageCredentials: creds, StageTimeout: *s.stageTimeout})
	if err != nil {
		return err
	}
	env.AfterStop(func() { con.Close() })
	srv, err := web.Listen(s.listen, con, env.Logger)
	if err != nil {
		return fmt.Errorf("INGESTQ_CONSOLE_LISTEN: %w", err)
	}
	env.Server.OnShutdown(srv.Shutdown)
	env.Logger.Info("serving the operator console", "url", "http://"+srv.Addr()+"/", "batcher", s.batcher,
		"read_only", con.ReadOnly(), "shared_session_key", key != nil)
	return nil
}

// dialCredentials is how the console dials the batcher and the stage
// replicas: as the services speak. Plaintext without TLS; with TLS it
// trusts the CA bundle of INGESTQ_TLS_CLIENT_CA (the deployment's own CA,
// which signs every service's certificate) or else the system's, and with
// mutual TLS presents the console's own certificate.
func dialCredentials(files config.TLSFiles) (credentials.TransportCredentials, error) {
	if files.Cert == "" {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if files.ClientCA != "" {
		pool, err := server.LoadCertPool(files.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("dialling the batcher and the stages: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			return nil, fmt.Errorf("dialling the batcher and the stages: %w", err)
		}
		cfg.RootCAs, cfg.Certificates = pool, []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}
