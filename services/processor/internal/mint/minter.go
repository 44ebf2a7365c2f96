package mint

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/protobuf/proto"
)

// Minter gives a claimed job a primary id. It records the id in the job's
// identifiers in ZooKeeper before it returns, so a job that restarts finds
// its id and never mints a second one; a job that has a primary id already
// keeps it.
type Minter interface {
	Mint(ctx context.Context, claim Job) (string, error)
}

// Job is what minting uses of a claimed job (a stage.Job).
type Job interface {
	Data() *v1.Job
	Update(ctx context.Context, ch jobs.Change) error
	MintFromCounter(ctx context.Context, counter string, makeID func(n int64) string) (string, error)
}

// Local mints from a counter in ZooKeeper (one per shoulder): the counter's
// step and the job's identifiers are written in one atomic operation.
type Local struct {
	Shoulder string // e.g. "ark:/99999/fk4"; see ValidShoulder
}

// Mint implements Minter.
func (m Local) Mint(ctx context.Context, claim Job) (string, error) {
	ark, err := claim.MintFromCounter(ctx, m.Shoulder, func(n int64) string { return NOIDName(m.Shoulder, n) })
	if err != nil {
		return "", fmt.Errorf("minting on %s: %w", m.Shoulder, err)
	}
	return ark, nil
}

// EZID mints through EZID's API (ezid.cdlib.org/doc/apidoc.html):
// POST /shoulder/<shoulder> with HTTP Basic credentials and an ANVL body,
// answered "success: <id>" or "error: <reason>".
type EZID struct {
	BaseURL  string // e.g. https://ezid.example.org (no trailing path)
	User     string
	Password string
	Shoulder string
	Client   *fetch.Client
	// Timeout bounds one call, answer included (default 30 s).
	Timeout time.Duration
}

// maxEZIDAnswer bounds what is read of an EZID answer: it is one line.
const maxEZIDAnswer = 64 << 10

// Mint implements Minter. EZID cannot mint and record in one step: the id
// is written to the job at once after EZID answers, and an error after a
// successful mint names the minted id so that it is not lost.
func (m EZID) Mint(ctx context.Context, claim Job) (string, error) {
	if id := claim.Data().GetIdentifiers().GetPrimaryId(); id != "" {
		return id, nil
	}
	ark, err := m.mint(ctx, claim.Data().GetMetadata())
	if err != nil {
		return "", err
	}
	ids := &v1.Identifiers{}
	if claim.Data().GetIdentifiers() != nil {
		ids = proto.Clone(claim.Data().GetIdentifiers()).(*v1.Identifiers)
	}
	ids.PrimaryId = ark
	if err := claim.Update(ctx, jobs.Change{Identifiers: ids}); err != nil {
		return "", fmt.Errorf("EZID minted %s but recording it in the job failed: %w", ark, err)
	}
	return ark, nil
}

func (m EZID) mint(ctx context.Context, md *v1.Metadata) (string, error) {
	endpoint := strings.TrimSuffix(m.BaseURL, "/") + "/shoulder/" + m.Shoulder
	body := ANVL([][2]string{
		{"_profile", "erc"},
		{"erc.who", md.GetWho()},
		{"erc.what", md.GetWhat()},
		{"erc.when", md.GetWhen()},
	})
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	header := http.Header{"Accept": {"text/plain"}}
	header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(m.User+":"+m.Password)))
	code, answer, err := answerOf(m.Client.Post(ctx, endpoint, "text/plain; charset=UTF-8", []byte(body), header))
	if err != nil {
		return "", fmt.Errorf("EZID: %w", err)
	}
	line, _, _ := strings.Cut(string(answer), "\n")
	line = strings.TrimSpace(line)
	if id, ok := strings.CutPrefix(line, "success: "); ok && code/100 == 2 {
		// A DOI answer is "success: doi:… | ark:/…"; the first id is the one asked for.
		id, _, _ = strings.Cut(id, " | ")
		id = strings.TrimSpace(id)
		if !strings.HasPrefix(id, m.Shoulder) {
			return "", fmt.Errorf("EZID %s: minted %q, which is not on shoulder %s", endpoint, id, m.Shoulder)
		}
		return id, nil
	}
	if reason, ok := strings.CutPrefix(line, "error: "); ok {
		return "", fmt.Errorf("EZID %s: HTTP %d: %s", endpoint, code, reason)
	}
	return "", fmt.Errorf("EZID %s: HTTP %d: unexpected answer %q", endpoint, code, truncate(line, 200))
}

// answerOf reads EZID's answer to a request, whatever its status: EZID
// explains a refusal in the body, which a *fetch.StatusError keeps the start
// of (its first line is all that is read).
func answerOf(resp *http.Response, err error) (code int, answer []byte, _ error) {
	if se, ok := errors.AsType[*fetch.StatusError](err); ok {
		return se.Code, se.Body, nil
	}
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err = io.ReadAll(io.LimitReader(resp.Body, maxEZIDAnswer))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, answer, nil
}

// ANVL writes name/value pairs as EZID reads them: one "name: value" line
// each, with '%', line breaks (and ':' in names) percent-encoded. Pairs with
// an empty value are left out.
func ANVL(pairs [][2]string) string {
	var b strings.Builder
	for _, p := range pairs {
		if p[1] == "" {
			continue
		}
		b.WriteString(anvlEscape(p[0], true))
		b.WriteString(": ")
		b.WriteString(anvlEscape(p[1], false))
		b.WriteByte('\n')
	}
	return b.String()
}

func anvlEscape(s string, name bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '\n' || c == '\r' || (name && c == ':') {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
