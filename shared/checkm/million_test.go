package checkm_test

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
)

const (
	millionRows  = 1_000_000
	millionLines = 3 + millionRows + 1 // header, profile, fields, rows, #%eof
)

// appendLine appends line n (1-based) of the generated manifest.
func appendLine(b []byte, n int) []byte {
	switch {
	case n == 1:
		return append(b, checkm.Header+"\n"...)
	case n == 2:
		return append(b, "#%profile | "+checkm.ProfileObject+"\n"...)
	case n == 3:
		return append(b, "#%fields | nfo:fileUrl | nfo:fileSize\n"...)
	case n == millionLines:
		return append(b, "#%eof\n"...)
	}
	row := n - 4
	b = append(b, "http://127.0.0.1/f/"...)
	b = strconv.AppendInt(b, int64(row), 10)
	b = append(b, " | "...)
	b = strconv.AppendInt(b, int64(row%1000), 10)
	return append(b, '\n')
}

// streamManifest writes the generated manifest into a pipe in 64 KiB
// writes; the channel says whether the writer got to the end.
func streamManifest() (io.ReadCloser, <-chan bool) {
	pr, pw := io.Pipe()
	finished := make(chan bool, 1)
	go func() {
		w := bufio.NewWriterSize(pw, 64<<10)
		line := make([]byte, 0, 128)
		for n := 1; n <= millionLines; n++ {
			line = appendLine(line[:0], n)
			if _, err := w.Write(line); err != nil {
				finished <- false
				return
			}
		}
		ok := w.Flush() == nil
		pw.Close()
		finished <- ok
	}()
	return pr, finished
}

// countingReader counts the bytes its reader handed out.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestParseRefusesAMillionLineManifestAtMaxLinesWhileStreaming(t *testing.T) {
	tests := []struct {
		name     string
		limits   checkm.Limits
		wantLine int
		// The writer cannot finish when more than Parse's buffer is left.
		writerStops bool
	}{
		{name: "default limit of 1,000,000 lines", limits: checkm.Limits{}, wantLine: checkm.DefaultMaxLines + 1},
		{name: "limit of 1,000 lines stops after the first thousand", limits: checkm.Limits{MaxLines: 1000}, wantLine: 1001, writerStops: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr, finished := streamManifest()
			r := &countingReader{r: pr}
			m, err := checkm.Parse(r, tt.limits)
			// Closing the read side ends the writer, blocked on what Parse
			// did not read.
			pr.Close()
			var pe *checkm.ParseError
			if !errors.As(err, &pe) || !errors.Is(err, checkm.ErrLimit) {
				t.Fatalf("Parse = %v, err %v; want a MaxLines ParseError", m, err)
			}
			if pe.Line != tt.wantLine {
				t.Errorf("error on line %d, want %d (%v)", pe.Line, tt.wantLine, err)
			}
			if finished := <-finished; finished && tt.writerStops {
				t.Errorf("the writer finished: Parse read the whole manifest before refusing it")
			}
			// Parse may have read ahead by its buffer, never more.
			var upTo []byte
			for n := 1; n <= tt.wantLine; n++ {
				upTo = appendLine(upTo, n)
			}
			if limit := int64(len(upTo)) + 64<<10; r.n > limit {
				t.Errorf("Parse read %d bytes; the first %d lines are %d bytes, and it should read at most %d", r.n, tt.wantLine, len(upTo), limit)
			}
		})
	}
}

func TestParseReadsAMillionLineManifestWhenTheLimitAllows(t *testing.T) {
	r, finished := streamManifest()
	m, err := checkm.Parse(r, checkm.Limits{MaxLines: millionLines})
	if err != nil {
		t.Fatal(err)
	}
	if !<-finished {
		t.Errorf("the writer did not finish")
	}
	if len(m.Entries) != millionRows {
		t.Fatalf("%d entries, want %d", len(m.Entries), millionRows)
	}
	last := m.Entries[millionRows-1]
	want := checkm.Entry{Line: 3 + millionRows, FileURL: "http://127.0.0.1/f/999999", FileSize: 999, FileName: "999999"}
	if last != want {
		t.Errorf("last entry = %+v, want %+v", last, want)
	}
}

// BenchmarkParseMillionLines measures the memory (B/op) and time to parse a
// 1,000,000-entry manifest streamed through a pipe; bytes/entry is the
// memory each entry costs.
func BenchmarkParseMillionLines(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		r, finished := streamManifest()
		m, err := checkm.Parse(r, checkm.Limits{MaxLines: millionLines})
		if err != nil || len(m.Entries) != millionRows {
			b.Fatalf("Parse: %v", err)
		}
		<-finished
	}
}

// BenchmarkParseDepositedMillionLines is BenchmarkParseMillionLines read
// as a depositor's manifest, each value looked at for "%7c".
func BenchmarkParseDepositedMillionLines(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		r, finished := streamManifest()
		m, err := checkm.ParseDeposited(r, checkm.Limits{MaxLines: millionLines})
		if err != nil || len(m.Entries) != millionRows {
			b.Fatalf("ParseDeposited: %v", err)
		}
		<-finished
	}
}

// BenchmarkParseRefusedAtMaxLines measures what a 1,000,000-line manifest
// costs when MaxLines (1,000) refuses it: the memory stays that of the first
// thousand lines.
func BenchmarkParseRefusedAtMaxLines(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		r, finished := streamManifest()
		if _, err := checkm.Parse(r, checkm.Limits{MaxLines: 1000}); !errors.Is(err, checkm.ErrLimit) {
			b.Fatalf("Parse: %v", err)
		}
		r.Close()
		<-finished
	}
}
