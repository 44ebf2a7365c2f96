package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Defaults are the settings whose defaults differ from service to service.
type Defaults struct {
	Listen        string // gRPC listen address, e.g. "127.0.0.1:7401"
	MetricsListen string // metrics listen address, e.g. "127.0.0.1:9401"
}

// Common is the configuration every ingestq program reads (RegisterCommon)
// and, for one that works on the queue, the queue's (RegisterQueue). Its
// fields are set by Registry.Parse.
type Common struct {
	ZooKeeper ZooKeeper
	// Listen is the gRPC listen address (health, reflection, PingService and
	// the stage's own API).
	Listen string
	// Advertise is where other processes reach the gRPC server
	// (INGESTQ_ADVERTISE_ADDR); empty: AdvertiseAddr derives it.
	Advertise string
	// MetricsListen is the metrics listen address; empty disables it.
	MetricsListen string
	// Concurrency is how many jobs a stage works on at once.
	Concurrency int
	// ProgressInterval is how often a stage measures the progress of its
	// jobs in flight and, when it changed, rewrites its worker entry.
	ProgressInterval time.Duration
	// AdminToken guards admin methods; empty leaves them open.
	AdminToken string
	TLS        TLSFiles
	// DrainTimeout bounds how long a stopping service waits for its
	// in-flight work to finish or be released.
	DrainTimeout time.Duration
	LogLevel     slog.Level
	// Pprof serves Go's profiles at /debug/pprof/ on the metrics address.
	Pprof bool
}

// ZooKeeper says how to reach the queue.
type ZooKeeper struct {
	Servers        []string // "host:port" addresses
	Root           string   // prefix every queue path hangs under; "" is "/"
	SessionTimeout time.Duration
	Auth           string // digest credential "user:password"; "" for none
}

// TLSFiles name PEM files. With none set the service speaks plaintext; with
// Cert and Key it speaks TLS; with ClientCA too it demands client
// certificates signed by that CA.
type TLSFiles struct {
	Cert, Key, ClientCA string
}

// RegisterCommon defines the settings every ingestq program reads: its
// listen addresses, admin token, TLS, drain timeout and logging. The
// returned Common is filled in by r.Parse, which also applies the rules
// that span several settings (key with certificate, token or token file).
// A program that works on the queue itself adds RegisterQueue's.
func RegisterCommon(r *Registry, d Defaults) *Common {
	c := &Common{}
	r.Func("listen", "INGESTQ_LISTEN", d.Listen,
		"gRPC listen address (health, reflection, PingService, the stage's API)", setAddress(&c.Listen, false))
	r.Func("metrics-listen", "INGESTQ_METRICS_LISTEN", d.MetricsListen,
		"Prometheus /metrics listen address; empty disables", setAddress(&c.MetricsListen, true))
	r.Func("admin-token", "INGESTQ_ADMIN_TOKEN", "",
		"bearer token that admin methods require; empty leaves them open (a flag shows in ps: prefer the variable or the file)", setString(&c.AdminToken))
	var tokenFile string
	r.Func("admin-token-file", "INGESTQ_ADMIN_TOKEN_FILE", "",
		"file holding the admin token (instead of INGESTQ_ADMIN_TOKEN)", setString(&tokenFile))
	r.Func("tls-cert", "INGESTQ_TLS_CERT", "",
		"PEM certificate for the gRPC port; with -tls-key turns on TLS", setString(&c.TLS.Cert))
	r.Func("tls-key", "INGESTQ_TLS_KEY", "",
		"PEM private key of -tls-cert", setString(&c.TLS.Key))
	r.Func("tls-client-ca", "INGESTQ_TLS_CLIENT_CA", "",
		"PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS)", setString(&c.TLS.ClientCA))
	r.Func("drain-timeout", "INGESTQ_DRAIN_TIMEOUT", "30s",
		"on SIGTERM, how long in-flight work may take to finish or be released", SetPositiveDuration(&c.DrainTimeout))
	r.Func("log-level", "INGESTQ_LOG_LEVEL", "info",
		"debug, info, warn or error", setLogLevel(&c.LogLevel))
	r.Func("pprof", "INGESTQ_PPROF", "false",
		"also serve Go's profiles at /debug/pprof/ on the metrics address (they show code and data: keep that address private)", setBool(&c.Pprof))

	r.Check(func() error {
		if tokenFile == "" {
			return nil
		}
		if c.AdminToken != "" {
			return errors.New("INGESTQ_ADMIN_TOKEN and INGESTQ_ADMIN_TOKEN_FILE are both set: set one")
		}
		token, err := ReadAdminToken(tokenFile)
		if err != nil {
			return fmt.Errorf("INGESTQ_ADMIN_TOKEN_FILE: %w", err)
		}
		c.AdminToken = token
		return nil
	})
	r.Check(func() error {
		switch {
		case (c.TLS.Cert == "") != (c.TLS.Key == ""):
			return errors.New("INGESTQ_TLS_CERT and INGESTQ_TLS_KEY: set both or neither")
		case c.TLS.ClientCA != "" && c.TLS.Cert == "":
			return errors.New("INGESTQ_TLS_CLIENT_CA needs INGESTQ_TLS_CERT and INGESTQ_TLS_KEY: mutual TLS is TLS first")
		}
		return nil
	})
	return c
}

// RegisterQueue defines into c the settings of a program that works on
// the queue itself (every service but the console, which reaches the
// queue through the batcher's API): the ZooKeeper to connect to, the
// address other processes reach its gRPC server at, and how many jobs a
// stage works on at once.
func (c *Common) RegisterQueue(r *Registry) {
	r.Func("zk-servers", "INGESTQ_ZK_SERVERS", "127.0.0.1:2181",
		"ZooKeeper servers, comma-separated host:port", setServers(&c.ZooKeeper.Servers))
	r.Func("zk-root", "INGESTQ_ZK_ROOT", "",
		"prefix every queue path hangs under, e.g. /ingestq (empty: /)", setRoot(&c.ZooKeeper.Root))
	r.Func("zk-session-timeout", "INGESTQ_ZK_SESSION_TIMEOUT", "10s",
		"ZooKeeper session timeout: how long a lost service keeps its locks", SetPositiveDuration(&c.ZooKeeper.SessionTimeout))
	r.Func("zk-auth", "INGESTQ_ZK_AUTH", "",
		"ZooKeeper digest credential user:password; nodes created get an ACL that only this identity may change",
		setDigestAuth(&c.ZooKeeper.Auth))
	r.Func("advertise-addr", "INGESTQ_ADVERTISE_ADDR", "",
		"host:port other processes reach the gRPC server at, written to the worker registry for the console's stage controls (in Kubernetes: the pod's IP and port); empty: the listen address, or this host's name and the listen port when it listens on every interface",
		setOptionalHostPort(&c.Advertise))
	r.Func("concurrency", "INGESTQ_CONCURRENCY", "4",
		"jobs a stage works on at once", SetPositiveInt(&c.Concurrency))
	r.Func("progress-interval", "INGESTQ_PROGRESS_INTERVAL", "5s",
		"how often a stage measures the bytes its jobs in flight moved and, when they changed, rewrites its /workers entry with them (for a step that lasted that long: quick steps cost no write)",
		SetPositiveDuration(&c.ProgressInterval))
}

// ReadAdminToken reads the admin token from the file INGESTQ_ADMIN_TOKEN_FILE
// names, as every service does: its content less the surrounding white
// space, refused when that leaves nothing (an empty token would turn the
// admin methods' guard off without anyone having asked for it).
func ReadAdminToken(path string) (string, error) {
	token, err := ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the admin token: %w", err)
	}
	if token == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return token, nil
}

func setServers(p *[]string) func(string) error {
	return func(s string) error {
		var servers []string
		for addr := range strings.SplitSeq(s, ",") {
			addr = strings.TrimSpace(addr)
			if addr == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return fmt.Errorf("%q is not host:port", addr)
			}
			servers = append(servers, addr)
		}
		if len(servers) == 0 {
			return errors.New("no server given")
		}
		*p = servers
		return nil
	}
}

func setRoot(p *string) func(string) error {
	return func(s string) error {
		if s != "" && (!strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/")) {
			return fmt.Errorf("%q must be empty or start with / and not end with /", s)
		}
		*p = s
		return nil
	}
}

func setDigestAuth(p *string) func(string) error {
	return func(s string) error {
		if user, _, ok := strings.Cut(s, ":"); s != "" && (!ok || user == "") {
			// The value is a secret: do not echo it.
			return errors.New("must be user:password")
		}
		*p = s
		return nil
	}
}

func setAddress(p *string, optional bool) func(string) error {
	return func(s string) error {
		if s == "" && optional {
			*p = ""
			return nil
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%q is not host:port", s)
		}
		*p = s
		return nil
	}
}

// SetPositiveInt parses a whole number of at least 1 into p, for
// Registry.Func (a count of attempts, of workers).
func SetPositiveInt(p *int) func(string) error {
	parse := setInt(p)
	return func(s string) error {
		if err := parse(s); err != nil {
			return err
		}
		if *p < 1 {
			return fmt.Errorf("%d: must be at least 1", *p)
		}
		return nil
	}
}

// SetNonNegativeDuration parses a duration of 0 or more into p, for
// Registry.Func (a wait, where 0 is none).
func SetNonNegativeDuration(p *time.Duration) func(string) error {
	parse := setDuration(p)
	return func(s string) error {
		if err := parse(s); err != nil {
			return err
		}
		if *p < 0 {
			return fmt.Errorf("%s: must not be negative", *p)
		}
		return nil
	}
}

// SetPositiveDuration parses a duration above 0 into p, for Registry.Func
// (a bound, where 0 would cut everything at once).
func SetPositiveDuration(p *time.Duration) func(string) error {
	parse := setDuration(p)
	return func(s string) error {
		if err := parse(s); err != nil {
			return err
		}
		if *p <= 0 {
			return fmt.Errorf("%s: must be positive", *p)
		}
		return nil
	}
}

func setLogLevel(p *slog.Level) func(string) error {
	return func(s string) error {
		if err := p.UnmarshalText([]byte(strings.TrimSpace(s))); err != nil {
			return fmt.Errorf("%q: want debug, info, warn or error", s)
		}
		return nil
	}
}

// setOptionalHostPort accepts host:port or empty.
func setOptionalHostPort(p *string) func(string) error {
	return func(v string) error {
		if v != "" {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("%q is not host:port", v)
			}
		}
		*p = v
		return nil
	}
}

// AdvertiseAddr is where other processes reach this process's gRPC server:
// INGESTQ_ADVERTISE_ADDR when set, else the listen address when it names a
// host, else (listening on every interface) this host's name and the port.
func (c *Common) AdvertiseAddr() string {
	if c.Advertise != "" {
		return c.Advertise
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return ""
	}
	if ip, err := netip.ParseAddr(host); host != "" && (err != nil || !ip.IsUnspecified()) {
		return c.Listen
	}
	name, err := os.Hostname()
	if err != nil {
		return ""
	}
	return net.JoinHostPort(name, port)
}
