// Package zktest runs real ZooKeeper servers for tests, benchmarks and the
// demo: Debian's zookeeper package, started as a Java process on a free
// loopback port with a throw-away data directory, stopped with its whole
// process group.
package zktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/testenv"
)

// EnvServers names the environment variable that points tests at an already
// running ZooKeeper ("host:port[,host:port]") instead of starting one.
const EnvServers = "INGESTQ_TEST_ZK"

// EnvClasspath overrides where the ZooKeeper jars are found.
const EnvClasspath = "ZOOKEEPER_CLASSPATH"

// DefaultClasspath is where Debian's zookeeper package puts its jars.
const DefaultClasspath = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"

// Options configure a server or ensemble.
type Options struct {
	// TickTime is ZooKeeper's time unit; sessions may be as short as 2 ticks
	// (default 500ms, so tests can expire a session in about a second).
	TickTime time.Duration
	// NoSync turns off fsync of the transaction log (faster tests; benchmarks
	// leave it on so the ceiling they report is an honest one).
	NoSync bool
	// JVMHeap caps the server's heap (default "1g": what the default queue
	// bound needs, docs/sizing.md; tests create batches of 58,000 and
	// 100,000 jobs).
	JVMHeap string
	// Log receives the servers' lines of output (default: a file in the data dir).
	Log func(server int, line string)
	// ClientHost is the address the servers take clients on (default
	// 127.0.0.1): another of this machine's addresses, for clients in a
	// network namespace that reaches it. Quorum traffic stays on loopback.
	ClientHost netip.Addr
}

// Server is one ZooKeeper server process.
type Server struct {
	ID         int    // 1-based position in its ensemble (1 when standalone)
	Addr       string // client address, 127.0.0.1:port (or Options.ClientHost:port)
	dir        string
	cfg        string
	opts       Options
	mu         sync.Mutex
	cmd        *exec.Cmd
	exited     chan struct{}
	peer, elec int
	// ports holds the ports of a standalone server (nil in an ensemble,
	// whose Stop gives them back) until Stop.
	ports *freeport.Reservation
}

// Start starts a standalone server with its data under dir.
func Start(ctx context.Context, dir string, opts Options) (*Server, error) {
	e, err := StartEnsemble(ctx, dir, 1, opts)
	if err != nil {
		return nil, err
	}
	e.Servers[0].ports = e.ports
	return e.Servers[0], nil
}

// Ensemble is a quorum of servers on loopback.
type Ensemble struct {
	Servers []*Server
	// ports are the servers' ports, held from every other test (freeport)
	// while they live, through a kill and restart too; Stop gives them back.
	ports *freeport.Reservation
}

// Addrs are the client addresses of every server.
func (e *Ensemble) Addrs() []string {
	out := make([]string, len(e.Servers))
	for i, s := range e.Servers {
		out[i] = s.Addr
	}
	return out
}

// Stop stops every server and gives back their ports.
func (e *Ensemble) Stop() {
	for _, s := range e.Servers {
		s.Stop()
	}
	e.ports.Close()
}

// Leader returns the index of the server that reports "Mode: leader", or -1.
func (e *Ensemble) Leader() int {
	for i, s := range e.Servers {
		if mode, err := s.Mode(); err == nil && mode == "leader" {
			return i
		}
	}
	return -1
}

// StartEnsemble starts n servers that form one quorum (n=1: standalone) and
// waits until every one of them serves.
func StartEnsemble(ctx context.Context, dir string, n int, opts Options) (*Ensemble, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if opts.TickTime <= 0 {
		opts.TickTime = 500 * time.Millisecond
	}
	if opts.JVMHeap == "" {
		opts.JVMHeap = "1g"
	}
	if !opts.ClientHost.IsValid() {
		opts.ClientHost = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	e := &Ensemble{ports: freeport.Reserve()}
	ports, err := e.ports.Take(3 * n)
	if err != nil {
		e.ports.Close()
		return nil, fmt.Errorf("zktest: %w", err)
	}
	for i := 0; i < n; i++ {
		s := &Server{ID: i + 1, Addr: netip.AddrPortFrom(opts.ClientHost, ports[3*i].Port()).String(), opts: opts,
			peer: int(ports[3*i+1].Port()), elec: int(ports[3*i+2].Port()), dir: filepath.Join(dir, fmt.Sprintf("zk%d", i+1))}
		e.Servers = append(e.Servers, s)
	}
	for _, s := range e.Servers {
		if err := s.writeConfig(e.Servers); err != nil {
			e.Stop()
			return nil, err
		}
		if err := s.launch(); err != nil {
			e.Stop()
			return nil, err
		}
	}
	for _, s := range e.Servers {
		if err := s.WaitServing(ctx); err != nil {
			e.Stop()
			return nil, err
		}
	}
	return e, nil
}

// Available reports whether a ZooKeeper server can be started here.
func Available() error {
	if _, err := exec.LookPath("java"); err != nil {
		return errors.New("zktest: java not found (ZooKeeper needs a JRE)")
	}
	for _, p := range strings.Split(classpath(), ":") {
		if strings.HasSuffix(p, ".jar") {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("zktest: %s missing: install Debian's zookeeper package (make deps) or set %s", p, EnvClasspath)
			}
		}
	}
	return nil
}

func classpath() string {
	if cp := os.Getenv(EnvClasspath); cp != "" {
		return cp
	}
	return DefaultClasspath
}

func (s *Server) writeConfig(all []*Server) error {
	data := filepath.Join(s.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	tick := int(s.opts.TickTime / time.Millisecond)
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=10\nsyncLimit=5\n", tick)
	client := netip.MustParseAddrPort(s.Addr)
	fmt.Fprintf(&b, "dataDir=%s\nclientPort=%d\nclientPortAddress=%s\n", data, client.Port(), client.Addr())
	fmt.Fprintf(&b, "minSessionTimeout=%d\nmaxSessionTimeout=60000\n", 2*tick)
	b.WriteString("maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=*\n")
	b.WriteString("autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n")
	if s.opts.NoSync {
		b.WriteString("forceSync=no\n")
	}
	if len(all) > 1 {
		for _, o := range all {
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", o.ID, o.peer, o.elec)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(s.ID)+"\n"), 0o644); err != nil {
			return fmt.Errorf("zktest: %w", err)
		}
	}
	s.cfg = filepath.Join(s.dir, "zoo.cfg")
	if err := os.WriteFile(s.cfg, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	return nil
}

func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("java",
		"-Xmx"+s.opts.JVMHeap, "-XX:+UseParallelGC",
		// jute.maxbuffer is left at its default (1 MiB), as on a production
		// server: what ingestq writes must fit it. (Responses are not held
		// to it by the server; a listing of 100,000 children, ~2 MB, goes
		// through, and the client's own limit is session.Options.MaxResponseBytes.)
		"-Dzookeeper.admin.enableServer=false",
		"-cp", classpath(),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", s.cfg)
	cmd.Env = serverEnv(os.Environ())
	// Its own process group, killed with the test binary if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("zktest: starting java: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	logFile, _ := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	go func(exited chan struct{}) {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s.opts.Log != nil {
				s.opts.Log(s.ID, sc.Text())
			} else if logFile != nil {
				fmt.Fprintln(logFile, sc.Text())
			}
		}
		cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(exited)
	}(s.exited)
	return nil
}

// serverEnv is environ less the variables through which the machine would
// add JVM options (_JAVA_OPTIONS even overrides the command line's): the
// server runs with the heap and collector asked for here, which the tests
// of 100,000 jobs need.
func serverEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// WaitServing waits until the server answers "ruok" with "imok" and has
// joined its quorum.
func (s *Server) WaitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if mode, err := s.Mode(); err == nil && mode != "" {
			return nil
		}
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("zktest: server %d exited while starting; see %s", s.ID, filepath.Join(s.dir, "server.log"))
		case <-ctx.Done():
			return fmt.Errorf("zktest: server %d at %s not serving: %w", s.ID, s.Addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Mode asks the server ("srvr") whether it is standalone, leader or follower.
func (s *Server) Mode() (string, error) {
	out, err := FourLetter(s.Addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("zktest: %s: not serving yet", s.Addr)
}

// FourLetter sends a four-letter-word command and returns the answer.
func FourLetter(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

// Kill stops the server at once (SIGKILL to its process group), as a crash would.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL)
	s.wait(10 * time.Second)
}

// Stop stops the server: SIGTERM, then SIGKILL after 5 seconds. A
// standalone server's ports go back too (Kill keeps them, for a Restart).
func (s *Server) Stop() {
	s.signal(syscall.SIGTERM)
	if !s.wait(5 * time.Second) {
		s.Kill()
	}
	if s.ports != nil {
		s.ports.Close()
	}
}

// Restart starts a stopped server again with the same data and port.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.launch(); err != nil {
		return err
	}
	return s.WaitServing(ctx)
}

// Pause freezes the server process (SIGSTOP); Resume thaws it.
func (s *Server) Pause()  { s.signal(syscall.SIGSTOP) }
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		syscall.Kill(-s.cmd.Process.Pid, sig)
	}
}

func (s *Server) wait(d time.Duration) bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return true
	}
	select {
	case <-exited:
		return true
	case <-time.After(d):
		return false
	}
}

// Main runs a test binary's tests against one ZooKeeper server: the one
// named by INGESTQ_TEST_ZK, or one started for this binary and stopped after
// it. Use it from TestMain: func TestMain(m *testing.M) { zktest.Main(m) }.
// The tests run without the machine's own settings (testenv.Isolate).
func Main(m *testing.M) {
	testenv.Isolate()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv(EnvServers) == "" {
		dir, err := os.MkdirTemp("", "ingestq-zk-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		srv, err := Start(context.Background(), dir, Options{NoSync: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer srv.Stop()
		os.Setenv(EnvServers, srv.Addr)
	}
	return m.Run()
}

// Servers returns the addresses of the test ZooKeeper (see Main).
func Servers(tb testing.TB) []string {
	tb.Helper()
	v := os.Getenv(EnvServers)
	if v == "" {
		tb.Fatalf("zktest: %s is not set: call zktest.Main from TestMain", EnvServers)
	}
	return strings.Split(v, ",")
}

// Root returns a root prefix no other test uses, so that tests sharing one
// server never see each other's nodes.
func Root(tb testing.TB) string {
	tb.Helper()
	name := strings.NewReplacer("/", "_", " ", "_", "#", "_").Replace(tb.Name())
	return fmt.Sprintf("/test/%s-%d-%d", name, os.Getpid(), time.Now().UnixNano())
}

// PID is the server's process id (0 when it is not running): benchmarks
// read what the server cost from /proc.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}
