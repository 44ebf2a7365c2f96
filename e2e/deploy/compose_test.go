package deploy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	"gopkg.in/yaml.v3"
)

// composeFile is the part of the Compose specification docker-compose.yml
// uses; decoding refuses any other key, so a misspelt one fails the test.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]*struct{}      `yaml:"volumes"`
	// Extensions are the x- fields whose anchors the services merge.
	Extensions map[string]any `yaml:",inline"`
}

type composeService struct {
	Image       string   `yaml:"image"`
	Profiles    []string `yaml:"profiles"`
	Command     []string `yaml:"command"`
	Hostname    string   `yaml:"hostname"`
	Restart     string   `yaml:"restart"`
	ReadOnly    bool     `yaml:"read_only"`
	Tmpfs       []string `yaml:"tmpfs"`
	CapDrop     []string `yaml:"cap_drop"`
	SecurityOpt []string `yaml:"security_opt"`
	Build       *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	StopGracePeriod string `yaml:"stop_grace_period"`
	DependsOn       map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Healthcheck *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		Retries     int      `yaml:"retries"`
		StartPeriod string   `yaml:"start_period"`
	} `yaml:"healthcheck"`
}

// versitygwVersion is the versitygw the Makefile installs for the tests.
var versitygwVersion = regexp.MustCompile(`(?m)^VERSITYGW_VERSION := (\S+)$`)

// checkComposeS3 checks the S3 store of docker-compose.yml: one versitygw
// server, of the version the tests run, in the s3 profile, serving a
// volume on its published port; one service of the same profile that
// makes the bucket (a folder of that volume) before it starts; and every
// stage whose binary has the S3 store pointed at that server and bucket,
// with the server's own credentials, INGESTQ_STORE choosing.
func checkComposeS3(t *testing.T, repo string, cf *composeFile, services []*service, servers, makers []string) {
	if len(servers) != 1 || len(makers) != 1 {
		t.Fatalf("S3 servers %v and bucket makers %v, want one of each", servers, makers)
	}
	srv, mk := cf.Services[servers[0]], cf.Services[makers[0]]
	mf, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if m := versitygwVersion.FindSubmatch(mf); m == nil || srv.Image != "versity/versitygw:"+string(m[1]) {
		t.Errorf("%s: image %s, want versity/versitygw at the Makefile's VERSITYGW_VERSION", servers[0], srv.Image)
	}
	if !slices.Equal(srv.Profiles, []string{"s3"}) || !slices.Equal(mk.Profiles, []string{"s3"}) {
		t.Errorf("profiles %v and %v, want both [s3]", srv.Profiles, mk.Profiles)
	}
	if len(srv.Command) != 2 || srv.Command[0] != "posix" {
		t.Fatalf("%s: command %v, want posix <folder>", servers[0], srv.Command)
	}
	served := srv.Command[1]
	volume := ""
	for _, v := range srv.Volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && path.Clean(parts[1]) == path.Clean(served) {
			volume = parts[0]
		}
	}
	if _, ok := cf.Volumes[volume]; !ok {
		t.Fatalf("%s serves %s, which is on no volume declared (%v)", servers[0], served, srv.Volumes)
	}
	port := strings.TrimPrefix(srv.Environment["VGW_PORT"], ":")
	if !slices.Contains(srv.Ports, "127.0.0.1:"+port+":"+port) {
		t.Errorf("%s: listens on %q (VGW_PORT), publishes %v: want it on 127.0.0.1", servers[0], port, srv.Ports)
	}
	if srv.DependsOn[makers[0]].Condition != "service_completed_successfully" {
		t.Errorf("%s starts before %s has made the bucket", servers[0], makers[0])
	}
	bucket := ""
	for _, v := range mk.Volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[0] == volume && len(mk.Command) == 3 && mk.Command[0] == "mkdir" && mk.Command[1] == "-p" {
			if rel, ok := strings.CutPrefix(path.Clean(mk.Command[2]), path.Clean(parts[1])+"/"); ok && !strings.Contains(rel, "/") {
				bucket = rel
			}
		}
	}
	if bucket == "" {
		t.Fatalf("%s: command %v, volumes %v: want mkdir -p of one folder of %s", makers[0], mk.Command, mk.Volumes, volume)
	}
	stores := 0
	for _, s := range services {
		if _, ok := s.reads["INGESTQ_S3_ENDPOINT"]; !ok {
			continue
		}
		stores++
		env := cf.Services[s.name].Environment
		want := map[string]string{
			"INGESTQ_STORE":         "${INGESTQ_STORE:-local}",
			"INGESTQ_S3_ENDPOINT":   "http://" + servers[0] + ":" + port,
			"INGESTQ_S3_BUCKET":     bucket,
			"INGESTQ_S3_REGION":     srv.Environment["VGW_REGION"],
			"INGESTQ_S3_PATH_STYLE": "true",
			"AWS_ACCESS_KEY_ID":     srv.Environment["ROOT_ACCESS_KEY_ID"],
			"AWS_SECRET_ACCESS_KEY": srv.Environment["ROOT_SECRET_ACCESS_KEY"],
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: %s=%q, want %q", s.name, k, env[k], v)
			}
		}
	}
	if stores == 0 {
		t.Error("no stage reads INGESTQ_S3_ENDPOINT")
	}
}

func readCompose(file string) (*composeFile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var cf composeFile
	if err := dec.Decode(&cf); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for k := range cf.Extensions {
		if !strings.HasPrefix(k, "x-") {
			return nil, fmt.Errorf("%s: top-level key %q is neither used by this test nor an x- extension", file, k)
		}
	}
	return &cf, nil
}

// volumesCheck checks a service's short-syntax volumes (source:target[:ro])
// and returns their targets: a named volume must be declared at the top
// level, and the profiles are read-only from examples/profiles.
func (cf *composeFile) volumesCheck(svc composeService) ([]string, error) {
	var targets []string
	var errs []error
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
			errs = append(errs, fmt.Errorf("volume %q: want source:target[:ro|rw]", v))
			continue
		}
		targets = append(targets, path.Clean(parts[1]))
		if _, ok := cf.Volumes[parts[0]]; !ok && !strings.HasPrefix(parts[0], ".") && !strings.HasPrefix(parts[0], "/") {
			errs = append(errs, fmt.Errorf("volume %s is not declared under volumes:", parts[0]))
		}
		if dir := svc.Environment["INGESTQ_PROFILES_DIR"]; dir != "" && path.Clean(parts[1]) == path.Clean(dir) && v != "./examples/profiles:"+parts[1]+":ro" {
			errs = append(errs, fmt.Errorf("profiles mounted as %s, want ./examples/profiles read-only", v))
		}
	}
	return targets, errors.Join(errs...)
}

func checkCompose(t *testing.T, repo string, cf *composeFile, services []*service) {
	// The ZooKeeper ensemble: the services running the official image.
	var zkNodes, zkServers, members, traceBackends, s3Servers, bucketMakers []string
	for _, name := range slices.Sorted(maps.Keys(cf.Services)) {
		svc := cf.Services[name]
		switch {
		case strings.HasPrefix(svc.Image, "zookeeper:"):
			host := cmp.Or(svc.Hostname, name)
			zkNodes, zkServers = append(zkNodes, name), append(zkServers, host+":2181")
			members = append(members, fmt.Sprintf("server.%s=%s:2888:3888;2181", svc.Environment["ZOO_MY_ID"], host))
		case strings.HasPrefix(svc.Image, "jaegertracing/"):
			traceBackends = append(traceBackends, name)
		case strings.HasPrefix(svc.Image, "versity/versitygw:"):
			s3Servers = append(s3Servers, name)
		case strings.HasPrefix(svc.Image, "busybox:"):
			bucketMakers = append(bucketMakers, name)
		case !slices.Contains(stack.Binaries, name):
			t.Errorf("service %s is neither a ZooKeeper node, the trace backend, the S3 store nor a program of services/ (%v)", name, stack.Binaries)
		}
	}

	t.Run("runs the S3 server the tests use with the s3 profile, and the stages that store reach its bucket with its credentials", func(t *testing.T) {
		checkComposeS3(t, repo, cf, services, s3Servers, bucketMakers)
	})

	t.Run("sends every stage's traces to its trace backend by default, whose UI is published on 127.0.0.1", func(t *testing.T) {
		if len(traceBackends) != 1 {
			t.Fatalf("trace backends %v, want one Jaeger service", traceBackends)
		}
		backend := cf.Services[traceBackends[0]]
		if !slices.Contains(backend.Ports, "127.0.0.1:16686:16686") {
			t.Errorf("%s: ports %v, want its UI on 127.0.0.1:16686", traceBackends[0], backend.Ports)
		}
		want := "${OTEL_EXPORTER_OTLP_ENDPOINT:-http://" + traceBackends[0] + ":4317}"
		for _, name := range stack.Binaries {
			if got := cf.Services[name].Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; got != want {
				t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %q, want %q", name, got, want)
			}
		}
	})

	t.Run("runs a three-node ZooKeeper 3.8 ensemble whose nodes agree on their members and report quorum health", func(t *testing.T) {
		if len(zkNodes) != 3 {
			t.Fatalf("%d ZooKeeper services, want 3", len(zkNodes))
		}
		for i, name := range zkNodes {
			svc := cf.Services[name]
			if id, err := strconv.Atoi(svc.Environment["ZOO_MY_ID"]); err != nil || id != i+1 {
				t.Errorf("%s: ZOO_MY_ID %q, want %d", name, svc.Environment["ZOO_MY_ID"], i+1)
			}
			if svc.Image != "zookeeper:3.8" {
				t.Errorf("%s: image %s, want zookeeper:3.8", name, svc.Image)
			}
			if got, want := svc.Environment["ZOO_SERVERS"], strings.Join(members, " "); got != want {
				t.Errorf("%s: ZOO_SERVERS %q, want %q", name, got, want)
			}
			// zkServer.sh status asks srvr, which must be whitelisted.
			if svc.Healthcheck == nil || !slices.Contains(svc.Healthcheck.Test, "zkServer.sh") ||
				!slices.Contains(strings.Split(svc.Environment["ZOO_4LW_COMMANDS_WHITELIST"], ","), "srvr") {
				t.Errorf("%s: want a healthcheck by zkServer.sh status, with srvr whitelisted", name)
			}
			if _, err := cf.volumesCheck(svc); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})

	checks := []struct {
		name  string
		check func(s *service, svc composeService) error
	}{
		{"builds ingestq/<name>:latest from the Dockerfile with the repository as context", func(s *service, svc composeService) error {
			if svc.Build.Context != "." || svc.Build.Dockerfile != "" && svc.Build.Dockerfile != "Dockerfile" || svc.Image != "ingestq/"+s.name+":latest" {
				return fmt.Errorf("image %s, build context %q, dockerfile %q", svc.Image, svc.Build.Context, svc.Build.Dockerfile)
			}
			return nil
		}},
		{"sets only variables the binary reads", func(s *service, svc composeService) error {
			return envCheck(s, svc.Environment)
		}},
		{"connects to every ZooKeeper node, or (the console) to none", func(s *service, svc composeService) error {
			if !s.readsQueue() {
				return nil // its environment holds only what it reads
			}
			if got, want := svc.Environment["INGESTQ_ZK_SERVERS"], strings.Join(zkServers, ","); got != want {
				return fmt.Errorf("INGESTQ_ZK_SERVERS %q, want %q", got, want)
			}
			return nil
		}},
		{"reaches the batcher's gRPC port by its service name", func(s *service, svc composeService) error {
			addr, ok := svc.Environment["INGESTQ_BATCHER_ADDR"]
			if _, reads := s.reads["INGESTQ_BATCHER_ADDR"]; !reads {
				return nil
			}
			if batcher := byName(services, "batcher"); !ok || addr != "batcher:"+batcher.defaultPort("INGESTQ_LISTEN") {
				return fmt.Errorf("INGESTQ_BATCHER_ADDR %q, want the batcher's service and gRPC port", addr)
			}
			if svc.DependsOn["batcher"].Condition != "service_healthy" {
				return errors.New("starts before the batcher is healthy")
			}
			return nil
		}},
		{"listens on every address at the default ports and publishes each on 127.0.0.1 only", func(s *service, svc composeService) error {
			env := s.effective(svc.Environment)
			var want []string
			for _, port := range listening(s, env) {
				want = append(want, "127.0.0.1:"+port+":"+port)
			}
			if !slices.Equal(slices.Sorted(slices.Values(svc.Ports)), slices.Sorted(slices.Values(want))) {
				return errors.Join(fmt.Errorf("ports %v, want %v", svc.Ports, want), listenCheck(s, env))
			}
			return listenCheck(s, env)
		}},
		{"starts once every ZooKeeper node is healthy, if it connects to them", func(s *service, svc composeService) error {
			if !s.readsQueue() {
				return nil
			}
			for _, n := range zkNodes {
				if svc.DependsOn[n].Condition != "service_healthy" {
					return fmt.Errorf("depends_on %s: want condition service_healthy", n)
				}
			}
			return nil
		}},
		{"waits longer than a drain before killing", func(s *service, svc composeService) error {
			drain, err := drainTimeout(s.effective(svc.Environment))
			if err != nil {
				return err
			}
			if grace, err := time.ParseDuration(svc.StopGracePeriod); err != nil || grace <= drain+stopGrace {
				return fmt.Errorf("stop_grace_period %q, want more than the drain timeout %s plus %s", svc.StopGracePeriod, drain, stopGrace)
			}
			return nil
		}},
		{"keeps every path it uses on a volume and reads the profiles read-only", func(s *service, svc composeService) error {
			targets, err := cf.volumesCheck(svc)
			return errors.Join(err, mountedCheck(s, s.effective(svc.Environment), targets))
		}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range services {
				if err := c.check(s, cf.Services[s.name]); err != nil {
					t.Errorf("%s: %v", s.name, err)
				}
			}
		})
	}
}
