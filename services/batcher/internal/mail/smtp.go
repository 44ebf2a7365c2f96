package mail

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/smtp"
	"time"
)

// smtpTimeout bounds one delivery when the caller's context has no deadline.
const smtpTimeout = time.Minute

// SMTP delivers messages to a mail server. It uses STARTTLS when the server
// offers it, and PLAIN authentication when Username is set (net/smtp allows
// that only over TLS or to localhost).
type SMTP struct {
	Addr     string // host:port
	From     string
	Hello    string // name sent in EHLO (default "localhost")
	Username string
	Password string
}

// Send delivers one message; ctx bounds the whole conversation.
func (s *SMTP) Send(ctx context.Context, m Message) error {
	data, err := Compose(m, s.From, time.Now())
	if err != nil {
		return err
	}
	addrs, err := recipients(m.To)
	if err != nil {
		return err
	}
	to := make([]string, len(addrs))
	for i, a := range addrs {
		to[i] = a.Address
	}
	from, err := parseSender(s.From)
	if err != nil {
		return err
	}
	if err := s.deliver(ctx, from, to, data); err != nil {
		return fmt.Errorf("sending %s through %s: %w", m.Key, s.Addr, err)
	}
	return nil
}

func (s *SMTP) deliver(ctx context.Context, from string, to []string, data []byte) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(smtpTimeout)
	}
	conn.SetDeadline(deadline)
	// net/smtp has no context: cancelling ctx cuts the connection's deadline.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	host, _, err := net.SplitHostPort(s.Addr)
	if err != nil {
		conn.Close()
		return err
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return err
	}
	defer c.Close()
	hello := s.Hello
	if hello == "" {
		hello = "localhost"
	}
	if err := c.Hello(hello); err != nil {
		return err
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(&tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}); err != nil {
			return fmt.Errorf("STARTTLS: %w", err)
		}
	}
	if s.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", s.Username, s.Password, host)); err != nil {
			return fmt.Errorf("authenticating as %s: %w", s.Username, err)
		}
	}
	if err := c.Mail(from); err != nil {
		return fmt.Errorf("MAIL FROM: %w", err)
	}
	for _, r := range to {
		if err := c.Rcpt(r); err != nil {
			return fmt.Errorf("RCPT TO %s: %w", r, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	return c.Quit()
}
