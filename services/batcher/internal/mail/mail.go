// Package mail sends the batcher's messages to depositors: over SMTP when a
// server is configured, otherwise as .eml files in an outbox directory, so
// that nothing is lost without a mail server. Every message has a key that
// the caller derives from what it reports (bid and report), which becomes
// its Message-ID and its outbox file name: a message sent again after a
// crash overwrites its file, and mail clients see one message, not two.
package mail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"time"
)

// Message is one mail.
type Message struct {
	// Key identifies the message for good, e.g. "bid0000000042-report-1".
	// Letters, digits, '.', '-' and '_' only.
	Key     string
	To      []string
	Subject string
	Body    string // plain text, UTF-8
}

// Sender delivers messages.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// validKey keeps a key usable both as a Message-ID's left part and as a
// file name.
func validKey(k string) error {
	if k == "" || len(k) > 200 {
		return fmt.Errorf("message key %q must be 1..200 characters", k)
	}
	for _, r := range k {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_'
		if !ok {
			return fmt.Errorf("message key %q: %q is not allowed", k, r)
		}
	}
	if strings.HasPrefix(k, ".") {
		return fmt.Errorf("message key %q must not start with '.'", k)
	}
	return nil
}

// parseSender returns the bare address of from.
func parseSender(from string) (string, error) {
	a, err := mail.ParseAddress(from)
	if err != nil {
		return "", fmt.Errorf("sender %q: %w", from, err)
	}
	return a.Address, nil
}

// recipients parses the To addresses; a message without any is an error.
func recipients(to []string) ([]*mail.Address, error) {
	if len(to) == 0 {
		return nil, errors.New("no recipient")
	}
	out := make([]*mail.Address, 0, len(to))
	for _, a := range to {
		addr, err := mail.ParseAddress(a)
		if err != nil {
			return nil, fmt.Errorf("recipient %q: %w", a, err)
		}
		out = append(out, addr)
	}
	return out, nil
}

// Compose renders m as an RFC 5322 message from `from`, dated now. The
// Message-ID is <key@domain of from>.
func Compose(m Message, from string, now time.Time) ([]byte, error) {
	if err := validKey(m.Key); err != nil {
		return nil, err
	}
	sender, err := mail.ParseAddress(from)
	if err != nil {
		return nil, fmt.Errorf("sender %q: %w", from, err)
	}
	to, err := recipients(m.To)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(m.Subject, "\r\n") {
		return nil, fmt.Errorf("subject of %s contains a line break", m.Key)
	}
	domain := sender.Address[strings.LastIndexByte(sender.Address, '@')+1:]
	toText := make([]string, len(to))
	for i, a := range to {
		toText[i] = a.String()
	}
	var b bytes.Buffer
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	header("From", sender.String())
	header("To", strings.Join(toText, ", "))
	header("Subject", mime.QEncoding.Encode("utf-8", m.Subject))
	header("Date", now.Format(time.RFC1123Z))
	header("Message-ID", "<"+m.Key+"@"+domain+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	body := strings.ReplaceAll(strings.ReplaceAll(m.Body, "\r\n", "\n"), "\n", "\r\n")
	if _, err := qp.Write([]byte(body)); err != nil {
		return nil, err
	}
	if err := qp.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
