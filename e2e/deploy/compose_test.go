package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
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
	Image           string                       `yaml:"image"`
	Build           *composeBuild                `yaml:"build"`
	Hostname        string                       `yaml:"hostname"`
	Restart         string                       `yaml:"restart"`
	ReadOnly        bool                         `yaml:"read_only"`
	Tmpfs           []string                     `yaml:"tmpfs"`
	CapDrop         []string                     `yaml:"cap_drop"`
	SecurityOpt     []string                     `yaml:"security_opt"`
	StopGracePeriod string                       `yaml:"stop_grace_period"`
	DependsOn       map[string]composeDependency `yaml:"depends_on"`
	Environment     map[string]string            `yaml:"environment"`
	Volumes         []string                     `yaml:"volumes"`
	Ports           []string                     `yaml:"ports"`
	Healthcheck     *composeHealthcheck          `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

type composeDependency struct {
	Condition string `yaml:"condition"`
}

type composeHealthcheck struct {
	Test        []string `yaml:"test"`
	Interval    string   `yaml:"interval"`
	Timeout     string   `yaml:"timeout"`
	Retries     int      `yaml:"retries"`
	StartPeriod string   `yaml:"start_period"`
}

// composeMount is a short-syntax volume: source:target[:mode].
type composeMount struct {
	Source, Target string
	ReadOnly       bool
}

func (s composeService) mounts() ([]composeMount, error) {
	var out []composeMount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
			return nil, fmt.Errorf("volume %q: want source:target[:ro|rw]", v)
		}
		out = append(out, composeMount{Source: parts[0], Target: path.Clean(parts[1]), ReadOnly: len(parts) == 3 && parts[2] == "ro"})
	}
	return out, nil
}

// zooKeeperNode is one node of the compose ensemble.
type zooKeeperNode struct {
	service, host string
	id            int
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

// zooKeeperNodes finds the ZooKeeper services (official image) and their
// ids.
func (cf *composeFile) zooKeeperNodes() ([]zooKeeperNode, error) {
	var nodes []zooKeeperNode
	for _, name := range slices.Sorted(maps.Keys(cf.Services)) {
		svc := cf.Services[name]
		if !strings.HasPrefix(svc.Image, "zookeeper:") {
			continue
		}
		id, err := strconv.Atoi(svc.Environment["ZOO_MY_ID"])
		if err != nil {
			return nil, fmt.Errorf("%s: ZOO_MY_ID %q: %w", name, svc.Environment["ZOO_MY_ID"], err)
		}
		host := svc.Hostname
		if host == "" {
			host = name
		}
		nodes = append(nodes, zooKeeperNode{service: name, host: host, id: id})
	}
	return nodes, nil
}

func checkCompose(t *testing.T, repo string, services []*service) {
	file := filepath.Join(repo, "docker-compose.yml")
	cf, err := readCompose(file)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cf.zooKeeperNodes()
	if err != nil {
		t.Fatal(err)
	}
	var zkServers []string
	for _, n := range nodes {
		zkServers = append(zkServers, n.host+":2181")
	}

	t.Run("runs a three-node ZooKeeper 3.8 ensemble whose nodes agree on its members and report quorum health", func(t *testing.T) {
		if len(nodes) != 3 {
			t.Fatalf("%d ZooKeeper services, want 3", len(nodes))
		}
		var members []string
		for _, n := range nodes {
			members = append(members, fmt.Sprintf("server.%d=%s:2888:3888;2181", n.id, n.host))
		}
		want := strings.Join(members, " ")
		ids := map[int]bool{}
		for _, n := range nodes {
			svc := cf.Services[n.service]
			if svc.Image != "zookeeper:3.8" {
				t.Errorf("%s: image %s, want zookeeper:3.8", n.service, svc.Image)
			}
			if ids[n.id] || n.id < 1 || n.id > 255 {
				t.Errorf("%s: ZOO_MY_ID %d is repeated or outside 1..255", n.service, n.id)
			}
			ids[n.id] = true
			if got := svc.Environment["ZOO_SERVERS"]; got != want {
				t.Errorf("%s: ZOO_SERVERS %q, want %q", n.service, got, want)
			}
			if svc.Healthcheck == nil || len(svc.Healthcheck.Test) == 0 {
				t.Errorf("%s: no healthcheck", n.service)
				continue
			}
			// zkServer.sh status asks srvr, which must be whitelisted.
			if slices.Contains(svc.Healthcheck.Test, "zkServer.sh") &&
				!slices.Contains(strings.Split(svc.Environment["ZOO_4LW_COMMANDS_WHITELIST"], ","), "srvr") {
				t.Errorf("%s: the healthcheck runs zkServer.sh status but ZOO_4LW_COMMANDS_WHITELIST %q lacks srvr",
					n.service, svc.Environment["ZOO_4LW_COMMANDS_WHITELIST"])
			}
			if err := namedVolumesCheck(cf, svc); err != nil {
				t.Errorf("%s: %v", n.service, err)
			}
		}
	})

	t.Run("every other service is one of the seven stages and each stage is there", func(t *testing.T) {
		for name, svc := range cf.Services {
			if strings.HasPrefix(svc.Image, "zookeeper:") {
				continue
			}
			if !slices.Contains(stack.Services, name) {
				t.Errorf("service %s is neither a ZooKeeper node nor a stage (%v)", name, stack.Services)
			}
		}
		for _, s := range services {
			if _, ok := cf.Services[s.name]; !ok {
				t.Errorf("no service %s", s.name)
			}
		}
	})

	checks := []struct {
		name  string
		check func(s *service, svc composeService) error
	}{
		{"builds its image from its Dockerfile with the repository as context", func(s *service, svc composeService) error {
			want := composeBuild{Context: ".", Dockerfile: "services/" + s.name + "/Dockerfile"}
			var errs []error
			if svc.Build == nil || *svc.Build != want {
				errs = append(errs, fmt.Errorf("build %+v, want %+v", svc.Build, want))
			}
			if want := "ingestq/" + s.name + ":latest"; svc.Image != want {
				errs = append(errs, fmt.Errorf("image %s, want %s", svc.Image, want))
			}
			return errors.Join(errs...)
		}},
		{"sets only variables the binary reads", func(s *service, svc composeService) error {
			return envCheck(s, svc.Environment)
		}},
		{"connects to every ZooKeeper node", func(s *service, svc composeService) error {
			if got, want := svc.Environment["INGESTQ_ZK_SERVERS"], strings.Join(zkServers, ","); got != want {
				return fmt.Errorf("INGESTQ_ZK_SERVERS %q, want %q", got, want)
			}
			return nil
		}},
		{"listens on every address at the default ports and publishes them on 127.0.0.1 only", func(s *service, svc composeService) error {
			want := []string{"127.0.0.1:" + s.grpcPort + ":" + s.grpcPort, "127.0.0.1:" + s.metricsPort + ":" + s.metricsPort}
			var errs []error
			if !slices.Equal(svc.Ports, want) {
				errs = append(errs, fmt.Errorf("ports %v, want %v", svc.Ports, want))
			}
			return errors.Join(append(errs,
				listenCheck("INGESTQ_LISTEN", svc.Environment["INGESTQ_LISTEN"], s.grpcPort),
				listenCheck("INGESTQ_METRICS_LISTEN", svc.Environment["INGESTQ_METRICS_LISTEN"], s.metricsPort))...)
		}},
		{"health-checks with the image's -check-health", func(s *service, svc composeService) error {
			want := []string{"CMD", entrypointDir + s.name, "-check-health"}
			if svc.Healthcheck == nil || !slices.Equal(svc.Healthcheck.Test, want) {
				return fmt.Errorf("healthcheck %+v, want test %q", svc.Healthcheck, want)
			}
			return nil
		}},
		{"starts once every ZooKeeper node is healthy", func(s *service, svc composeService) error {
			var errs []error
			for _, n := range nodes {
				if dep, ok := svc.DependsOn[n.service]; !ok || dep.Condition != "service_healthy" {
					errs = append(errs, fmt.Errorf("depends_on %s: %+v, want condition service_healthy", n.service, dep))
				}
			}
			return errors.Join(errs...)
		}},
		{"waits longer than a drain before killing", func(s *service, svc composeService) error {
			drain, err := drainTimeout(s, svc.Environment)
			if err != nil {
				return err
			}
			grace, err := time.ParseDuration(svc.StopGracePeriod)
			if err != nil {
				return fmt.Errorf("stop_grace_period %q: %w", svc.StopGracePeriod, err)
			}
			if grace <= drain+stopGrace {
				return fmt.Errorf("stop_grace_period %s, want more than the drain timeout %s plus %s", grace, drain, stopGrace)
			}
			return nil
		}},
		{"keeps every path it is given on a volume and reads the profiles read-only", func(s *service, svc composeService) error {
			mounts, err := svc.mounts()
			if err != nil {
				return err
			}
			var targets []string
			var errs []error
			for _, m := range mounts {
				targets = append(targets, m.Target)
				if dir, ok := svc.Environment["INGESTQ_PROFILES_DIR"]; ok && m.Target == path.Clean(dir) &&
					(m.Source != "./examples/profiles" || !m.ReadOnly) {
					errs = append(errs, fmt.Errorf("profiles mounted from %s (read-only %v), want ./examples/profiles read-only", m.Source, m.ReadOnly))
				}
			}
			return errors.Join(append(errs, mountedCheck(svc.Environment, targets), namedVolumesCheck(cf, svc))...)
		}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range services {
				if svc, ok := cf.Services[s.name]; ok {
					if err := c.check(s, svc); err != nil {
						t.Errorf("%s: %v", s.name, err)
					}
				}
			}
		})
	}
}

// namedVolumesCheck checks that the named volumes a service mounts are
// declared at the top level.
func namedVolumesCheck(cf *composeFile, svc composeService) error {
	mounts, err := svc.mounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if strings.HasPrefix(m.Source, ".") || strings.HasPrefix(m.Source, "/") {
			continue // a bind mount
		}
		if _, ok := cf.Volumes[m.Source]; !ok {
			errs = append(errs, fmt.Errorf("volume %s is not declared under volumes:", m.Source))
		}
	}
	return errors.Join(errs...)
}
