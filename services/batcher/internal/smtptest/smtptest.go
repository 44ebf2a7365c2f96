// Package smtptest runs a real SMTP server on loopback for tests (the
// emersion/go-smtp server) and keeps every message it accepts.
package smtptest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/mail"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Message is one accepted delivery.
type Message struct {
	From   string
	To     []string
	Data   []byte
	Header mail.Header
	Body   []byte // still transfer-encoded
}

// Server is an SMTP server on 127.0.0.1.
type Server struct {
	Addr string

	mu       sync.Mutex
	messages []Message
	arrived  chan struct{} // closed and replaced on each delivery
	// refuse, when set, makes every DATA fail with a 451 (a server in trouble).
	refuse bool
}

// Start serves SMTP on a free loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{arrived: make(chan struct{})}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &session{s: s}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout = 10 * time.Second
	srv.WriteTimeout = 10 * time.Second
	srv.MaxMessageBytes = 16 << 20
	srv.ErrorLog = testLogger{t}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return s
}

// Refuse makes the server answer every message with a temporary failure
// (true) or accept again (false).
func (s *Server) Refuse(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
}

// Messages returns what was delivered so far.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// WaitFor waits until n messages have arrived and returns them.
func (s *Server) WaitFor(ctx context.Context, n int) ([]Message, error) {
	for {
		s.mu.Lock()
		got, ch := len(s.messages), s.arrived
		s.mu.Unlock()
		if got >= n {
			return s.Messages(), nil
		}
		select {
		case <-ctx.Done():
			return s.Messages(), fmt.Errorf("%d of %d messages arrived: %w", got, n, ctx.Err())
		case <-ch:
		}
	}
}

type session struct {
	s    *Server
	from string
	to   []string
}

func (ss *session) Reset()        { ss.from, ss.to = "", nil }
func (ss *session) Logout() error { return nil }

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	if ss.s.refuse {
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
	}
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "unparsable message: " + err.Error()}
	}
	body, err := io.ReadAll(msg.Body)
	if err != nil {
		return err
	}
	ss.s.messages = append(ss.s.messages, Message{From: ss.from, To: ss.to, Data: data, Header: msg.Header, Body: body})
	close(ss.s.arrived)
	ss.s.arrived = make(chan struct{})
	return nil
}

type testLogger struct{ t testing.TB }

func (l testLogger) Printf(format string, v ...any) { l.t.Logf("smtp server: "+format, v...) }
func (l testLogger) Println(v ...any)               { l.t.Log(append([]any{"smtp server:"}, v...)...) }
