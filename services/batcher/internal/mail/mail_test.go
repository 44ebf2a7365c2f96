package mail

import (
	"bytes"
	"context"
	"io"
	"mime"
	"mime/quotedprintable"
	netmail "net/mail"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/services/batcher/internal/smtptest"
	"github.com/ingestq/ingestq/shared/loopbacktest"
)

const from = "ingestq <ingestq@localhost>"

func sample() Message {
	return Message{
		Key:     "bid0000000042-report-1",
		To:      []string{"Depositor <depositor@example.org>", "curator@example.org"},
		Subject: "ingestq: batch bid0000000042 completed — ünïcode",
		Body:    "Batch bid0000000042\nCompleted: 2\nÄrger: none, a long line " + strings.Repeat("x", 120) + "\n",
	}
}

func decodeBody(t *testing.T, body []byte) string {
	t.Helper()
	b, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\r\n", "\n")
}

func TestSMTPDeliversToEveryRecipientWithADeterministicMessageID(t *testing.T) {
	srv := smtptest.Start(t)
	s := &SMTP{Addr: srv.Addr, From: from}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := sample()
	if err := s.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	msgs, err := srv.WaitFor(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := msgs[0]
	if got.From != "ingestq@localhost" || strings.Join(got.To, ",") != "depositor@example.org,curator@example.org" {
		t.Errorf("envelope from %q to %v", got.From, got.To)
	}
	if id := got.Header.Get("Message-ID"); id != "<bid0000000042-report-1@localhost>" {
		t.Errorf("Message-ID %q", id)
	}
	if id2 := msgs[1].Header.Get("Message-ID"); id2 != got.Header.Get("Message-ID") {
		t.Errorf("a resent message has Message-ID %q, the first %q: clients would show two", id2, got.Header.Get("Message-ID"))
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(got.Header.Get("Subject"))
	if err != nil || subject != m.Subject {
		t.Errorf("subject %q (%v), want %q", subject, err, m.Subject)
	}
	if body := decodeBody(t, got.Body); body != m.Body {
		t.Errorf("body %q, want %q", body, m.Body)
	}
}

func TestSMTPReportsTheServersRefusal(t *testing.T) {
	srv := smtptest.Start(t)
	srv.Refuse(true)
	s := &SMTP{Addr: srv.Addr, From: from}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Send(ctx, sample())
	if err == nil || !strings.Contains(err.Error(), "451") || !strings.Contains(err.Error(), "bid0000000042-report-1") {
		t.Errorf("Send to a refusing server: %v, want an error naming the message and the 451", err)
	}
}

func TestSMTPStopsWhenTheContextEnds(t *testing.T) {
	// A server that accepts the connection and never says a word.
	silent := loopbacktest.Silent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- (&SMTP{Addr: silent, From: from}).Send(ctx, sample()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Send to a silent server succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Send did not return after its context ended")
	}
}

func TestOutboxWritesOneFilePerKeyAndOverwritesOnResend(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outbox")
	o := &Outbox{Dir: dir, From: from}
	m := sample()
	if err := o.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	m.Body = "second version\n"
	if err := o.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "bid0000000042-report-1.eml" {
		t.Fatalf("outbox holds %v, want exactly bid0000000042-report-1.eml", entries)
	}
	data, err := os.ReadFile(o.Path(m.Key))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := netmail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the .eml file is not a mail message: %v", err)
	}
	body, _ := io.ReadAll(msg.Body)
	if got := decodeBody(t, body); got != "second version\n" {
		t.Errorf("body %q, want the resent version", got)
	}
}

func TestComposeRefusesWhatWouldBreakTheMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Message)
		want string
	}{
		{"a key with a slash", func(m *Message) { m.Key = "../etc/passwd" }, "message key"},
		{"an empty key", func(m *Message) { m.Key = "" }, "message key"},
		{"no recipient", func(m *Message) { m.To = nil }, "no recipient"},
		{"a malformed recipient", func(m *Message) { m.To = []string{"not an address"} }, `recipient "not an address"`},
		{"a line break in the subject", func(m *Message) { m.Subject = "hi\r\nBcc: victim@example.org" }, "line break"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sample()
			tc.edit(&m)
			_, err := Compose(m, from, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Compose: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := Compose(sample(), "nobody", time.Now()); err == nil {
		t.Error("Compose accepted a malformed sender")
	}
}
