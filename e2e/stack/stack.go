// Package stack runs the whole ingestq pipeline on one machine: a ZooKeeper
// (started here, or an ensemble given), the seven services and the
// operator console as separate processes from their built binaries, each on
// its own loopback ports, with every working directory under one run
// directory. `make demo`, `make up`, the end-to-end tests and the chaos
// suite all start it the same way.
package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Services are the seven stage services, in pipeline order.
var Services = []string{"batcher", "estimator", "provisioner", "downloader", "processor", "recorder", "notifier"}

// Console is the operator console: a client of the batcher's API, started
// once the services serve.
const Console = "console"

// Binaries are the programs of services/: the seven services, then the
// console.
var Binaries = append(slices.Clone(Services), Console)

// Options configure a stack.
type Options struct {
	// Dir holds everything the stack writes: ZooKeeper data, logs, working
	// storage, the object store, the inventory database, the mail outbox.
	Dir string
	// BinDir holds the service binaries (make build).
	BinDir string
	// ProfilesDir is the collection profiles directory.
	ProfilesDir string
	// ZooKeeper: servers to use; empty starts a standalone server in Dir.
	ZooKeeper []string
	// Root is the queue's root prefix (default "/ingestq").
	Root string
	// Replicas per service (default 1).
	Replicas map[string]int
	// Env is added to every process's environment (it wins over the
	// stack's). INGESTQ_CONSOLE_LISTEN set there is the console's address
	// (empty: no console); unset, the console gets a free port.
	// The stack allows payload, manifest and callback URLs on loopback
	// (INGESTQ_FETCH_ALLOW, INGESTQ_CALLBACK_ALLOW), where its depositors
	// serve; set them empty here for the services' default refusal.
	Env map[string]string
	// AdminToken, when set, guards the admin methods.
	AdminToken string
	// Placements run chosen replicas in network namespaces the caller made.
	Placements map[Replica]Placement
	// ReplicaEnv is added to chosen replicas' environment (it wins over
	// Env): a setting one replica needs alone, such as the address of its
	// failpoints' endpoint (GOFAIL_HTTP).
	ReplicaEnv map[Replica]map[string]string
	// ReplicaBinDir runs chosen replicas from binaries of another build
	// (another version of the code); the others run BinDir's.
	ReplicaBinDir map[Replica]string
	// ServeVersions has the recorder serve the local store's versions over
	// HTTP on a port of its own (INGESTQ_VERSIONS_LISTEN, Proc.Versions):
	// a lease then carries a fetch_url, as make up's does.
	ServeVersions bool
	// ClientTLS is how the stack's own health checks dial the services when
	// Env turns on TLS (INGESTQ_TLS_CERT, INGESTQ_TLS_KEY and, for mutual
	// TLS, INGESTQ_TLS_CLIENT_CA): the CA to trust and, for mutual TLS, a
	// client certificate. Nil dials plaintext.
	ClientTLS *tls.Config
}

// Replica names one process of the stack: a service and its index.
type Replica struct {
	Service string
	Index   int
}

// Placement runs a replica in a network namespace (made by the caller, who
// also connects it to this one): the stack starts it through
// `ip netns exec`, and its listeners bind Addr, an address of the
// namespace that this one reaches, instead of loopback.
type Placement struct {
	NetNS string
	Addr  netip.Addr
}

// Stack is a running pipeline.
type Stack struct {
	opts    Options
	ZK      *zktest.Server // nil when Options.ZooKeeper was given
	Servers []string
	Root    string
	// Directories the services share.
	WorkRoot, StoreRoot, OutboxDir, InventoryDB, LogDir string

	ports *freeport.Reservation // its processes' ports, given back by Stop

	mu    sync.Mutex
	procs map[string][]*Proc
}

// ErrExitedStarting is a process that ended before it served: its log says
// why.
var ErrExitedStarting = errors.New("exited while starting")

// Proc is one service process.
type Proc struct {
	Service string
	Index   int
	Addr    string // gRPC
	Metrics string // Prometheus /metrics
	Console string // the console's HTTP address; "" for the services
	// Serve is where a processor serves the versions it prepares for
	// Merritt's storage service (INGESTQ_MERRITT_SERVE_LISTEN; used only
	// with a Merritt node); "" for the other processes.
	Serve string
	// Versions is where the recorder serves the local store's versions
	// (INGESTQ_VERSIONS_LISTEN, with Options.ServeVersions); "" otherwise.
	Versions string
	bin      string
	netns    string // network namespace to start in; "" for this one
	env      []string
	creds    credentials.TransportCredentials
	logPath  string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Start brings the stack up and waits until every service reports SERVING.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Root == "" {
		opts.Root = "/ingestq"
	}
	s := &Stack{
		opts:        opts,
		Root:        opts.Root,
		WorkRoot:    filepath.Join(opts.Dir, "work"),
		StoreRoot:   filepath.Join(opts.Dir, "store"),
		OutboxDir:   filepath.Join(opts.Dir, "outbox"),
		InventoryDB: filepath.Join(opts.Dir, "inventory.db"),
		LogDir:      filepath.Join(opts.Dir, "logs"),
		procs:       map[string][]*Proc{},
		ports:       freeport.Reserve(),
	}
	for _, d := range []string{s.WorkRoot, s.StoreRoot, s.OutboxDir, s.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			s.Stop(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("stack: %w", err)
		}
	}
	s.Servers = opts.ZooKeeper
	if len(s.Servers) == 0 {
		zk, err := zktest.Start(ctx, filepath.Join(opts.Dir, "zookeeper"), zktest.Options{})
		if err != nil {
			s.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
		s.ZK = zk
		s.Servers = []string{zk.Addr}
	}
	if err := s.plan(); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	// The console, a client of the batcher, starts once the services serve.
	for _, group := range [][]string{Services, {Console}} {
		for _, name := range group {
			for _, p := range s.procs[name] {
				if err := p.start(); err != nil {
					s.Stop(context.WithoutCancel(ctx))
					return nil, err
				}
			}
		}
		for _, name := range group {
			for _, p := range s.procs[name] {
				if err := p.WaitServing(ctx); err != nil {
					s.Stop(context.WithoutCancel(ctx))
					return nil, err
				}
			}
		}
	}
	return s, nil
}

// portsPerProc: gRPC, metrics, and the console's HTTP port, the
// processor's server of versions for Merritt's storage service or the
// recorder's of the local store's versions.
const portsPerProc = 3

// plan makes every process of the stack, each with ports of its own, held
// by the stack's reservation while it lives (a killed process restarts on
// its ports).
func (s *Stack) plan() error {
	total := 1 // the console
	for _, name := range Services {
		total += max(1, s.opts.Replicas[name])
	}
	addrs, err := s.ports.Take(portsPerProc * total)
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	for _, name := range Services {
		for i := range max(1, s.opts.Replicas[name]) {
			s.procs[name] = append(s.procs[name], s.newProc(name, i, addrs[:portsPerProc]))
			addrs = addrs[portsPerProc:]
		}
	}
	if console := s.newProc(Console, 0, addrs[:portsPerProc]); console.Console != "" {
		s.procs[Console] = []*Proc{console}
	}
	return nil
}

func (s *Stack) newProc(name string, i int, addrs []netip.AddrPort) *Proc {
	place, placed := s.opts.Placements[Replica{name, i}]
	if placed {
		// Its ports, free on loopback here, are free in its own namespace.
		for k, a := range addrs {
			addrs[k] = netip.AddrPortFrom(place.Addr, a.Port())
		}
	}
	binDir := s.opts.BinDir
	if d, ok := s.opts.ReplicaBinDir[Replica{name, i}]; ok {
		binDir = d
	}
	p := &Proc{netns: place.NetNS, Service: name, Index: i, Addr: addrs[0].String(), Metrics: addrs[1].String(), bin: filepath.Join(binDir, name),
		logPath: filepath.Join(s.LogDir, fmt.Sprintf("%s-%d.log", name, i)), creds: insecure.NewCredentials()}
	if s.opts.ClientTLS != nil {
		p.creds = credentials.NewTLS(s.opts.ClientTLS)
	}
	env := map[string]string{
		"INGESTQ_ZK_SERVERS":         strings.Join(s.Servers, ","),
		"INGESTQ_ZK_ROOT":            s.Root,
		"INGESTQ_ZK_SESSION_TIMEOUT": "4s",
		"INGESTQ_LISTEN":             p.Addr,
		"INGESTQ_METRICS_LISTEN":     p.Metrics,
		"INGESTQ_WORK_ROOT":          s.WorkRoot,
		"INGESTQ_STORE_ROOT":         s.StoreRoot,
		"INGESTQ_OUTBOX_DIR":         s.OutboxDir,
		"INGESTQ_INVENTORY_DB":       s.InventoryDB,
		"INGESTQ_PROFILES_DIR":       s.opts.ProfilesDir,
		"INGESTQ_DRAIN_TIMEOUT":      "10s",
		"INGESTQ_ADMIN_TOKEN":        s.opts.AdminToken,
		// Everything the stack fetches and calls back runs on this machine.
		"INGESTQ_FETCH_ALLOW":    "loopback",
		"INGESTQ_CALLBACK_ALLOW": "loopback",
		// The working storage is a folder on this machine's disk, which
		// everything else on the machine fills too: the provisioner's
		// bounds are for a volume of its own, and would hold every job
		// (those of unknown size above 60%) on a disk that happens to be
		// fuller. Here a job waits only when the disk has no room for it.
		"INGESTQ_PROVISION_MAX_USAGE":             "1",
		"INGESTQ_PROVISION_UNESTIMATED_MAX_USAGE": "1",
	}
	switch name {
	case Console:
		// A port of its own: the default would collide between stacks
		// running at once. It reads and acts through the first batcher.
		env["INGESTQ_CONSOLE_LISTEN"] = addrs[2].String()
		env["INGESTQ_BATCHER_ADDR"] = s.procs["batcher"][0].Addr
	case "processor":
		// Each processor its own address to serve versions on, for a
		// stack whose versions go to Merritt's storage service.
		p.Serve = addrs[2].String()
		env["INGESTQ_MERRITT_SERVE_LISTEN"] = p.Serve
	case "recorder":
		if s.opts.ServeVersions {
			p.Versions = addrs[2].String()
			env["INGESTQ_VERSIONS_LISTEN"] = p.Versions
		}
	}
	for k, v := range s.opts.Env {
		env[k] = v
	}
	for k, v := range s.opts.ReplicaEnv[Replica{name, i}] {
		env[k] = v
	}
	if name == Console {
		// A console address given in Env is where the console is (empty:
		// none), so that what the stack reports is what was started.
		p.Console = env["INGESTQ_CONSOLE_LISTEN"]
	}
	p.env = os.Environ()
	for k, v := range env {
		p.env = append(p.env, k+"="+v)
	}
	return p
}

// Procs returns the processes of one service.
func (s *Stack) Procs(service string) []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.procs[service])
}

// InventoryReadOnly is the data source name ("sqlite" driver of
// database/sql) that reads the inventory without writing: its path escaped,
// as SQLite's URI filenames end at '?' or '#' and decode %XX.
func (s *Stack) InventoryReadOnly() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(s.InventoryDB), RawQuery: "mode=ro"}).String()
}

// Addr is the gRPC address of a service's first replica.
func (s *Stack) Addr(service string) string { return s.Procs(service)[0].Addr }

// ConsoleAddr is the console's HTTP address, "" when the stack runs none.
func (s *Stack) ConsoleAddr() string {
	if ps := s.Procs(Console); len(ps) > 0 {
		return ps[0].Console
	}
	return ""
}

// Stop stops every service, then the ZooKeeper the stack started, and
// gives back the ports it reserved.
func (s *Stack) Stop(ctx context.Context) error {
	err := s.StopServices(ctx)
	if s.ZK != nil {
		s.ZK.Stop()
	}
	s.ports.Close()
	return err
}

// StopServices stops every process, the console and the services
// (SIGTERM: they drain and release their locks), and returns those that
// did not exit cleanly.
func (s *Stack) StopServices(ctx context.Context) error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, name := range slices.Backward(Binaries) {
		for _, p := range s.Procs(name) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.Stop(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *Proc) start() error {
	p.mu.Lock()
	bin := p.bin
	p.mu.Unlock()
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("stack: %s binary missing (make build): %w", p.Service, err)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	cmd := exec.Command(bin)
	if p.netns != "" {
		// ip execs the binary: the process signalled and waited for is it.
		cmd = exec.Command("ip", "netns", "exec", p.netns, bin)
	}
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group (signals reach only it), killed with the stack's
	// process if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("stack: starting %s: %w", p.Service, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// WaitServing waits until the process's health check says SERVING.
func (p *Proc) WaitServing(ctx context.Context) error {
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(p.creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		callCtx, callCancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.Check(callCtx, &healthpb.HealthCheckRequest{})
		callCancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("stack: %s %w; see %s", p.Service, ErrExitedStarting, p.logPath)
		case <-ctx.Done():
			return fmt.Errorf("stack: %s not serving at %s: %w; see %s", p.Service, p.Addr, ctx.Err(), p.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and waits for a clean exit (SIGKILL when ctx ends).
func (p *Proc) Stop(ctx context.Context) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			return fmt.Errorf("stack: %s-%d exited with %d; see %s", p.Service, p.Index, code, p.logPath)
		}
		return nil
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("stack: %s-%d did not stop in time; killed", p.Service, p.Index)
	}
}

// Kill stops the process at once (SIGKILL), as a crash would.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// UseBinDir makes the process's next start run the binary of its
// service in dir: a rolling upgrade stops a replica and starts it again
// from the new build.
func (p *Proc) UseBinDir(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bin = filepath.Join(dir, p.Service)
}

// Bin is the binary the process runs (or ran last).
func (p *Proc) Bin() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bin
}

// Restart starts a stopped or killed process again on the same ports.
func (p *Proc) Restart(ctx context.Context) error {
	if err := p.start(); err != nil {
		return err
	}
	return p.WaitServing(ctx)
}

// Freeze stops the process with SIGSTOP; Thaw continues it (SIGCONT).
func (p *Proc) Freeze() { p.signal(syscall.SIGSTOP) }

// Thaw continues a frozen process.
func (p *Proc) Thaw() { p.signal(syscall.SIGCONT) }

func (p *Proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// Exited reports whether the process was started and has ended since
// (a crash, a kill, a stop).
func (p *Proc) Exited() bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return true
	default:
		return false
	}
}

// PID is the process id (0 when not running).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// LogPath is where the process's output goes.
func (p *Proc) LogPath() string { return p.logPath }
