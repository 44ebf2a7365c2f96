package docs

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/waittest"
)

// The guides are run as written, the commands of their shell blocks one
// after another, as a reader does in a clone of the repository:
//
//   - a ```sh block runs in bash in the repository's top folder, and must
//     succeed; ```sh background runs while the guide goes on (make up, a
//     web server), stopped with Ctrl-C (SIGINT) at the end; ```sh repeat is
//     run again until its output shows what the guide says it shows;
//   - a ```text block right after a block is (an excerpt of) what that
//     block prints: each of its lines must be in the output, in order, `…`
//     standing for anything;
//   - values that differ from run to run (addresses, batch and job ids,
//     ARKs, lease ids, the run folder) are learned from the output, where
//     the guide shows an example of each, and put in the later commands in
//     place of the example; a loopback port a command chooses itself
//     (a web server's) becomes a free one;
//   - variables a block sets (B=…, export TOKEN=…) hold for the blocks
//     after it, as in the reader's shell.
//
// `go install` of grpcurl is not run: the test puts the grpcurl that
// e2e/go.mod pins on the PATH, and checks that the guide installs that
// version. HOME is a folder of the test's, and the operator console takes
// a free port (other tests may hold its default, 8401).

// guideBlock is a fenced block of a guide that runs.
type guideBlock struct {
	mode   string   // "", "background" or "repeat"
	code   string   // the commands
	expect []string // what its output shows, from the ```text block after it
	line   int      // where it begins, for messages
}

// fence is the first line of a fenced block: its info string.
var fence = regexp.MustCompile("^\\s*```\\s*(\\S*)\\s*(\\S*)")

// guideBlocks reads the blocks of a guide that run, with the output each
// shows.
func guideBlocks(text string) []guideBlock {
	var blocks []guideBlock
	var cur *guideBlock
	var body []string
	in, lang, mode, start := false, "", "", 0
	for i, line := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			if !in {
				in, lang, mode, start, body = true, m[1], m[2], i+1, nil
				continue
			}
			in = false
			switch lang {
			case "sh":
				blocks = append(blocks, guideBlock{mode: mode, code: strings.Join(body, "\n"), line: start})
				cur = &blocks[len(blocks)-1]
			case "text":
				if cur != nil && cur.expect == nil {
					for _, l := range body {
						if strings.TrimSpace(l) != "" {
							cur.expect = append(cur.expect, l)
						}
					}
				}
			}
			continue
		}
		if in {
			body = append(body, line)
		}
	}
	return blocks
}

// runToken is a value that differs from run to run, as a guide shows an
// example of it.
var runToken = regexp.MustCompile(`127\.0\.0\.1:\d{2,5}|\bbid\d{10}\b|\bjid\d{10}\b|\bark:/\d+/[a-z0-9]+|\bark_\d+_[a-z0-9]+|\b[0-9a-f]{32}\b|[^\s"']*/run/\d{8}-\d{6}`)

// guideRun runs one guide.
type guideRun struct {
	t      *testing.T
	name   string
	env    []string
	values map[string]string // the guide's example → this run's value
	vars   []string          // the shell variables the blocks set so far
	bg     []background
}

// background is a command running in the background, and its end.
type background struct {
	cmd    *exec.Cmd
	exited chan error
}

// runGuide runs a guide's blocks in order.
func runGuide(t *testing.T, name string) {
	text, err := os.ReadFile(filepath.Join(repo, name))
	if err != nil {
		t.Fatal(err)
	}
	blocks := guideBlocks(string(text))
	if len(blocks) == 0 {
		t.Fatalf("%s has no block to run", name)
	}
	g := &guideRun{t: t, name: name, values: map[string]string{}}
	g.env = guideEnv(t)
	// Ports the commands choose themselves (a command names them before
	// any output shows them) become free ones.
	shown := map[string]bool{}
	for _, b := range blocks {
		for _, tok := range runToken.FindAllString(b.code, -1) {
			if strings.HasPrefix(tok, "127.0.0.1:") && !shown[tok] && g.values[tok] == "" {
				g.values[tok] = "127.0.0.1:" + strconv.Itoa(freePort(t))
			}
		}
		for _, l := range b.expect {
			for _, tok := range runToken.FindAllString(l, -1) {
				shown[tok] = true
			}
		}
	}
	defer g.stop()
	for _, b := range blocks {
		g.run(b)
		if t.Failed() {
			return
		}
	}
}

// guideEnv is the environment of a guide's shell: the test's, with a
// HOME of its own (Go's caches kept where they are), grpcurl on the PATH
// and the console on a free port.
func guideEnv(t *testing.T) []string {
	t.Helper()
	goEnv, err := exec.Command("go", "env", "GOPATH", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	paths := strings.Fields(string(goEnv))
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "HOME" || k == "PATH"
	})
	return append(env, "HOME="+t.TempDir(), "PATH="+grpcurlDir(t)+":"+os.Getenv("PATH"),
		"GOPATH="+paths[0], "GOMODCACHE="+paths[1], "GOCACHE="+paths[2], "PYTHONUNBUFFERED=1",
		"INGESTQ_CONSOLE_LISTEN=127.0.0.1:"+strconv.Itoa(freePort(t)))
}

// grpcurlInstall is a guide's line that installs grpcurl.
var grpcurlInstall = regexp.MustCompile(`^go install github\.com/fullstorydev/grpcurl/cmd/grpcurl@(\S+)$`)

// assignment is a line that sets a shell variable.
var assignment = regexp.MustCompile(`^(?:export )?[A-Za-z_][A-Za-z0-9_]*=\S`)

// commands are a block's commands as this run runs them: the guide's
// example values replaced, grpcurl's installation checked and left out.
func (g *guideRun) commands(b guideBlock) string {
	var lines []string
	for _, line := range strings.Split(b.code, "\n") {
		if m := grpcurlInstall.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			if want := grpcurlVersion(g.t); m[1] != want {
				g.t.Errorf("%s:%d installs grpcurl %s; e2e/go.mod pins %s", g.name, b.line, m[1], want)
			}
			continue
		}
		lines = append(lines, line)
	}
	code := g.substitute(strings.Join(lines, "\n"))
	for _, line := range strings.Split(code, "\n") {
		if assignment.MatchString(strings.TrimSpace(line)) && b.mode == "" {
			g.vars = append(g.vars, strings.TrimSpace(line))
		}
	}
	return code
}

// substitute puts this run's values in place of the guide's examples, and
// free ports in place of those the guide chooses (bare too: "8000").
func (g *guideRun) substitute(s string) string {
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range g.values {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		s = strings.ReplaceAll(s, k, g.values[k])
		if port, ok := strings.CutPrefix(k, "127.0.0.1:"); ok {
			_, free, _ := strings.Cut(g.values[k], ":")
			s = regexp.MustCompile(`\b`+port+`\b`).ReplaceAllString(s, free)
		}
	}
	return s
}

func (g *guideRun) shell(ctx context.Context, code string) *exec.Cmd {
	script := "set -eo pipefail\n" + strings.Join(g.vars, "\n") + "\n" + code
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = repo
	cmd.Env = g.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs one block.
func (g *guideRun) run(b guideBlock) {
	t := g.t
	code := g.commands(b)
	t.Logf("%s:%d ($ %s)", g.name, b.line, strings.ReplaceAll(code, "\n", "; "))
	switch b.mode {
	case "background":
		var out syncBuffer
		cmd := g.shell(context.Background(), code)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		g.bg = append(g.bg, background{cmd, exited})
		deadline := time.After(10 * time.Minute)
		for {
			if g.expect(b, out.String(), false) {
				return
			}
			select {
			case err := <-exited:
				t.Fatalf("%s:%d ended (%v) before it showed what the guide says:\n%s", g.name, b.line, err, out.String())
			case <-deadline:
				t.Fatalf("%s:%d did not show what the guide says in 10 minutes:\n%s", g.name, b.line, out.String())
			case <-time.After(200 * time.Millisecond):
			}
		}
	case "repeat", "":
		// A repeat block runs until it shows what the guide shows after
		// it; once its time is up, a last run reports what is missing.
		deadline := time.Now().Add(3 * time.Minute)
		waittest.Until(t, 4*time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			out, err := g.shell(ctx, code).CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("%s:%d: %v\n%s", g.name, b.line, err, out)
			}
			last := b.mode != "repeat" || time.Now().After(deadline)
			if g.expect(b, string(out), last) || last {
				return nil
			}
			return fmt.Errorf("%s:%d: the output the guide shows after the block", g.name, b.line)
		})
	default:
		t.Fatalf("%s:%d: a block of mode %q, not background or repeat", g.name, b.line, b.mode)
	}
}

// expect says whether out shows every line the guide shows after the
// block, in order, learning the run's values; with report, a line it does
// not show fails the test.
func (g *guideRun) expect(b guideBlock, out string, report bool) bool {
	pos := 0
	learned := map[string]string{}
	for _, want := range b.expect {
		re, tokens := g.linePattern(want)
		loc := re.FindStringSubmatchIndex(out[pos:])
		if loc == nil {
			if report {
				g.t.Errorf("%s:%d: the output does not show\n  %s\n(as %s) in:\n%s", g.name, b.line, want, re, out)
			}
			return false
		}
		for i, tok := range tokens {
			learned[tok] = out[pos+loc[2+2*i] : pos+loc[3+2*i]]
		}
		pos += loc[1]
	}
	for k, v := range learned {
		g.values[k] = v
	}
	return true
}

// linePattern is the pattern of a line the guide shows: its words in
// order, spaces of any width, … anything, each example value not learned
// a group that learns it (and one learned, the value learned).
func (g *guideRun) linePattern(line string) (*regexp.Regexp, []string) {
	var tokens []string
	line = runToken.ReplaceAllStringFunc(strings.TrimSpace(line), func(tok string) string {
		tokens = append(tokens, tok)
		return "\x00" + strconv.Itoa(len(tokens)-1) + "\x00"
	})
	pattern := regexp.QuoteMeta(line)
	pattern = strings.ReplaceAll(pattern, "…", `.*?`)
	pattern = regexp.MustCompile(`\s+`).ReplaceAllString(pattern, `\s+`)
	var learn []string
	pattern = regexp.MustCompile("\x00(\\d+)\x00").ReplaceAllStringFunc(pattern, func(ph string) string {
		i, _ := strconv.Atoi(strings.Trim(ph, "\x00"))
		tok := tokens[i]
		if v, ok := g.values[tok]; ok {
			return regexp.QuoteMeta(v)
		}
		learn = append(learn, tok)
		return "(" + tokenKind(tok) + ")"
	})
	return regexp.MustCompile(pattern), learn
}

// tokenKind is the pattern of the run's values of the kind of tok.
func tokenKind(tok string) string {
	switch {
	case strings.HasPrefix(tok, "127.0.0.1:"):
		return `127\.0\.0\.1:\d+`
	case strings.HasPrefix(tok, "bid"):
		return `bid\d{10}`
	case strings.HasPrefix(tok, "jid"):
		return `jid\d{10}`
	case strings.HasPrefix(tok, "ark:/"):
		return `ark:/\d+/[a-z0-9]+`
	case strings.HasPrefix(tok, "ark_"):
		return `ark_\d+_[a-z0-9]+`
	case strings.Contains(tok, "/run/"):
		return `[^\s"']*/run/\d{8}-\d{6}`
	}
	return `[0-9a-f]{32}`
}

// stop ends what runs in the background as a reader does, with Ctrl-C,
// and waits for it to end.
func (g *guideRun) stop() {
	for _, b := range slices.Backward(g.bg) {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-b.exited:
		case <-time.After(90 * time.Second):
			g.t.Errorf("%s: a background command did not stop within 90 s of Ctrl-C", g.name)
			syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.exited
		}
	}
	// The run folders the guide's make up and make demo made.
	for k, v := range g.values {
		if strings.Contains(k, "/run/") && strings.HasPrefix(v, "/") {
			os.RemoveAll(v)
		}
	}
}

// syncBuffer is a buffer a background command writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var (
	grpcurlOnce sync.Once
	grpcurlBin  string
	grpcurlErr  error
)

// grpcurlDir is a folder holding the grpcurl e2e/go.mod pins (a tool of
// the module), built once.
func grpcurlDir(t *testing.T) string {
	t.Helper()
	grpcurlOnce.Do(func() {
		dir, err := os.MkdirTemp(binDir, "grpcurl-")
		if err != nil {
			grpcurlErr = err
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "grpcurl"), "github.com/fullstorydev/grpcurl/cmd/grpcurl").CombinedOutput()
		if err != nil {
			grpcurlErr = fmt.Errorf("building grpcurl: %w\n%s", err, out)
		}
		grpcurlBin = dir
	})
	if grpcurlErr != nil {
		t.Fatal(grpcurlErr)
	}
	return grpcurlBin
}

// grpcurlVersion is the version of grpcurl e2e/go.mod requires.
func grpcurlVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/fullstorydev/grpcurl").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/fullstorydev/grpcurl: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestTheTutorialWorksAsWritten runs docs/tutorial.md: make demo, a
// deposit of the reader's own through make up, an admin action.
func TestTheTutorialWorksAsWritten(t *testing.T) {
	runGuide(t, "docs/tutorial.md")
}

// TestTheInventoryGuideWorksAsWritten runs docs/inventory.md: a stack
// whose recorder leaves recording to an inventory, a lease by hand, and
// the example client.
func TestTheInventoryGuideWorksAsWritten(t *testing.T) {
	runGuide(t, "docs/inventory.md")
}
