package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server serves a Console on its own listener.
type Server struct {
	http   *http.Server
	lis    net.Listener
	served chan error
}

// Listen starts serving c on addr (host:port).
func Listen(addr string, c *Console, log *slog.Logger) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	s := &Server{
		http: &http.Server{
			Handler:           c,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			// A request's work is bounded by Options.RequestTimeout; the
			// answer then still has to reach a slow browser.
			WriteTimeout:   c.timeout + 30*time.Second,
			IdleTimeout:    2 * time.Minute,
			MaxHeaderBytes: 64 << 10,
			ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		lis:    lis,
		served: make(chan error, 1),
	}
	go func() { s.served <- s.http.Serve(lis) }()
	return s, nil
}

// Addr is the address the console listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Shutdown stops taking connections and waits for requests in flight
// until ctx ends, then cuts them off.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("console: %w", err), s.http.Close())
	}
	if serveErr := <-s.served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("console: %w", serveErr))
	}
	return err
}
