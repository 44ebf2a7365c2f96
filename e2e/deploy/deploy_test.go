package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	"golang.org/x/mod/modfile"
)

// service is what the deployment files are checked against, learned from
// the service itself.
type service struct {
	name       string
	dockerfile *dockerfile
	// reads maps each environment variable the binary reads to its
	// built-in default.
	reads map[string]string
	// grpcPort and metricsPort are the ports of the default listen
	// addresses.
	grpcPort, metricsPort string
}

// stopGrace is how long shared/service lets gRPC calls run on after the
// drain timeout: a runtime must wait longer than both before SIGKILL.
const stopGrace = 5 * time.Second

// entrypointDir is where every image puts its binary.
const entrypointDir = "/usr/local/bin/"

func TestDeploymentFilesMatchTheServices(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := readDockerignore(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	services := make([]*service, len(stack.Services))
	t.Run("every image builds from what its Dockerfile copies", func(t *testing.T) {
		for i, name := range stack.Services {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				services[i] = buildLikeDockerfile(t, repo, ignore, name)
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("Dockerfile", func(t *testing.T) { checkDockerfiles(t, repo, services) })
	t.Run("docker-compose.yml", func(t *testing.T) { checkCompose(t, repo, services) })
	t.Run("deploy/k8s", func(t *testing.T) { checkKubernetes(t, repo, services) })
}

// buildLikeDockerfile builds a service as its Dockerfile's build stage
// does, in a tree holding only what that stage copies from the context
// (less .dockerignore), then asks the binary what it reads.
func buildLikeDockerfile(t *testing.T, repo string, ignore dockerignore, name string) *service {
	df, err := parseDockerfile(filepath.Join(repo, "services", name, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	build := df.stageNamed("build")
	if build == nil {
		t.Fatalf("%s: no stage named build", df.Path)
	}
	var goBuild *instruction
	for _, in := range build.steps("RUN") {
		if strings.Contains(in.Args, "go build") {
			goBuild = &in
		}
	}
	if goBuild == nil {
		t.Fatalf("%s: the build stage runs no go build", df.Path)
	}
	for _, want := range []string{"CGO_ENABLED=0", "GOWORK=off", "go build -trimpath", "-ldflags='-s -w'", "-o /out/" + name + " ."} {
		if !strings.Contains(goBuild.Args, want) {
			t.Errorf("%s:%d: go build command %q lacks %q", df.Path, goBuild.Line, goBuild.Args, want)
		}
	}
	copies, err := build.contextCopies()
	if err != nil {
		t.Fatalf("%s: %v", df.Path, err)
	}
	root := t.TempDir()
	if err := stageContext(repo, ignore, copies, root); err != nil {
		t.Fatalf("%s: %v", df.Path, err)
	}
	bin := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, filepath.FromSlash(build.workdir()))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: building in %s with only the copied directories: %v\n%s", df.Path, build.workdir(), err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "-print-env-table").Output()
	if err != nil {
		t.Fatalf("%s -print-env-table: %v", name, err)
	}
	reads, err := parseEnvTable(out)
	if err != nil {
		t.Fatalf("%s -print-env-table: %v", name, err)
	}
	s := &service{name: name, dockerfile: df, reads: reads}
	if s.grpcPort, err = portOf(reads["INGESTQ_LISTEN"]); err != nil {
		t.Fatalf("%s: default INGESTQ_LISTEN: %v", name, err)
	}
	if s.metricsPort, err = portOf(reads["INGESTQ_METRICS_LISTEN"]); err != nil {
		t.Fatalf("%s: default INGESTQ_METRICS_LISTEN: %v", name, err)
	}
	return s
}

// envTableRow matches a row of -print-env-table: variable, flag, default.
var envTableRow = regexp.MustCompile("^\\| `([A-Z0-9_]+)` \\| `-[a-z0-9-]+` \\| (\\(empty\\)|`[^`]*`) \\|")

func parseEnvTable(table []byte) (map[string]string, error) {
	reads := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(table))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		m := envTableRow.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("row not understood: %s", line)
		}
		def := ""
		if m[2] != "(empty)" {
			def = strings.Trim(m[2], "`")
		}
		reads[m[1]] = def
	}
	if len(reads) == 0 {
		return nil, errors.New("no variable listed")
	}
	return reads, sc.Err()
}

// portOf returns the port of a host:port address.
func portOf(addr string) (string, error) {
	_, port, err := net.SplitHostPort(addr)
	return port, err
}

// listenCheck checks a listen address a deployment sets: every address of
// the container, on the service's default port.
func listenCheck(variable, value, wantPort string) error {
	host, port, err := net.SplitHostPort(value)
	switch {
	case err != nil:
		return fmt.Errorf("%s=%q: %w", variable, value, err)
	case host != "0.0.0.0" && host != "" && host != "::":
		return fmt.Errorf("%s=%q: a container must listen on every address, not %s", variable, value, host)
	case port != wantPort:
		return fmt.Errorf("%s=%q: port %s, but the service's default (used everywhere else) is %s", variable, value, port, wantPort)
	}
	return nil
}

// telemetryVariable reports whether name is one of the OpenTelemetry
// variables shared/telemetry reads (see its package documentation); no
// other non-INGESTQ variable means anything to a service.
func telemetryVariable(name string) bool {
	switch name {
	case "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER":
		return true
	}
	return false
}

// envCheck checks the variables a deployment gives a service: each must be
// one the binary reads (or a telemetry variable).
func envCheck(s *service, env map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if _, ok := s.reads[k]; ok || telemetryVariable(k) {
			continue
		}
		errs = append(errs, fmt.Errorf("sets %s, which the %s binary does not read (-print-env-table)", k, s.name))
	}
	return errors.Join(errs...)
}

// drainTimeout is the drain timeout a deployment gives a service: its
// INGESTQ_DRAIN_TIMEOUT, or the binary's default.
func drainTimeout(s *service, env map[string]string) (time.Duration, error) {
	v, ok := env["INGESTQ_DRAIN_TIMEOUT"]
	if !ok {
		v = s.reads["INGESTQ_DRAIN_TIMEOUT"]
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("INGESTQ_DRAIN_TIMEOUT %q: %w", v, err)
	}
	return d, nil
}

// pathVariable reports whether a variable names a file or a directory the
// service writes or reads: a deployment must back it with a volume.
func pathVariable(name string) bool {
	switch name {
	case "INGESTQ_WORK_ROOT", "INGESTQ_STORE_ROOT", "INGESTQ_OUTBOX_DIR", "INGESTQ_PROFILES_DIR", "INGESTQ_INVENTORY_DB":
		return true
	}
	return false
}

// mountedCheck checks that every path variable set in env lies under one
// of mounts (container paths).
func mountedCheck(env map[string]string, mounts []string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !pathVariable(k) {
			continue
		}
		p := path.Clean(env[k])
		if !slices.ContainsFunc(mounts, func(m string) bool { return p == m || strings.HasPrefix(p, m+"/") }) {
			errs = append(errs, fmt.Errorf("%s=%s is on no volume (mounted: %v): its data would die with the container", k, env[k], mounts))
		}
	}
	return errors.Join(errs...)
}

func checkDockerfiles(t *testing.T, repo string, services []*service) {
	checks := []struct {
		name  string
		check func(s *service) error
	}{
		{"builds in golang:1.26-bookworm and ships distroless static nonroot", func(s *service) error {
			build, final := s.dockerfile.stageNamed("build"), s.dockerfile.final()
			var errs []error
			if build.From != "golang:1.26-bookworm" {
				errs = append(errs, fmt.Errorf("build stage FROM %s, want golang:1.26-bookworm", build.From))
			}
			if final.From != "gcr.io/distroless/static-debian12:nonroot" {
				errs = append(errs, fmt.Errorf("final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot", final.From))
			}
			return errors.Join(errs...)
		}},
		{"runs as the nonroot user", func(s *service) error {
			users := s.dockerfile.final().steps("USER")
			if len(users) == 0 {
				return errors.New("no USER in the final stage")
			}
			if u := users[len(users)-1].Args; u != "65532:65532" && u != "65532" && u != "nonroot" && u != "nonroot:nonroot" {
				return fmt.Errorf("USER %s, want nonroot (65532)", u)
			}
			return nil
		}},
		{"exposes exactly the default gRPC and metrics ports", func(s *service) error {
			var exposed []string
			for _, in := range s.dockerfile.final().steps("EXPOSE") {
				exposed = append(exposed, strings.Fields(in.Args)...)
			}
			slices.Sort(exposed)
			want := []string{s.grpcPort, s.metricsPort}
			slices.Sort(want)
			if !slices.Equal(exposed, want) {
				return fmt.Errorf("EXPOSE %v, want %v (the binary's default gRPC and metrics ports)", exposed, want)
			}
			return nil
		}},
		{"listens on every address at the default ports and sets only variables the binary reads", func(s *service) error {
			env, err := s.dockerfile.final().env()
			if err != nil {
				return err
			}
			return errors.Join(
				listenCheck("INGESTQ_LISTEN", env["INGESTQ_LISTEN"], s.grpcPort),
				listenCheck("INGESTQ_METRICS_LISTEN", env["INGESTQ_METRICS_LISTEN"], s.metricsPort),
				envCheck(s, env))
		}},
		{"copies the module and every directory its go.mod replace directives name, in the same layout", func(s *service) error {
			return replaceCheck(repo, s)
		}},
		{"starts the binary it built and health-checks it with -check-health", func(s *service) error {
			final := s.dockerfile.final()
			bin := entrypointDir + s.name
			var errs []error
			copied := false
			for _, in := range final.steps("COPY") {
				if in.flag("from") == "build" && in.Args == "/out/"+s.name+" "+bin {
					copied = true
				}
			}
			if !copied {
				errs = append(errs, fmt.Errorf("no COPY --from=build /out/%s %s", s.name, bin))
			}
			entry := final.steps("ENTRYPOINT")
			if len(entry) != 1 {
				return errors.Join(append(errs, fmt.Errorf("%d ENTRYPOINT instructions, want 1", len(entry)))...)
			}
			if argv, err := execForm(entry[0].Args); err != nil || !slices.Equal(argv, []string{bin}) {
				errs = append(errs, fmt.Errorf("ENTRYPOINT %s, want [%q] (%v)", entry[0].Args, bin, err))
			}
			hc := final.steps("HEALTHCHECK")
			if len(hc) != 1 {
				return errors.Join(append(errs, fmt.Errorf("%d HEALTHCHECK instructions, want 1", len(hc)))...)
			}
			cmd, ok := strings.CutPrefix(hc[0].Args, "CMD ")
			argv, err := execForm(cmd)
			if !ok || err != nil || !slices.Equal(argv, []string{bin, "-check-health"}) {
				errs = append(errs, fmt.Errorf("HEALTHCHECK %s, want CMD [%q, \"-check-health\"] (exec form: the image has no shell)", hc[0].Args, bin))
			}
			return errors.Join(errs...)
		}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range services {
				if err := c.check(s); err != nil {
					t.Errorf("%s: %v", s.dockerfile.Path, err)
				}
			}
		})
	}
}

// replaceCheck checks that the build stage copies the service's module
// and, for each local replace directive of its go.mod, the directory it
// names, at the same place relative to the module as in the repository.
func replaceCheck(repo string, s *service) error {
	modDir := path.Join("services", s.name)
	gomod := filepath.Join(repo, filepath.FromSlash(modDir), "go.mod")
	b, err := os.ReadFile(gomod)
	if err != nil {
		return err
	}
	mf, err := modfile.ParseLax(gomod, b, nil)
	if err != nil {
		return err
	}
	copies, err := s.dockerfile.stageNamed("build").contextCopies()
	if err != nil {
		return err
	}
	// Where each copied directory lands in the build stage.
	dest := map[string]string{}
	for _, c := range copies {
		for _, src := range c.Sources {
			dest[path.Clean(src)] = c.Dest
		}
	}
	modDest, ok := dest[modDir]
	if !ok {
		return fmt.Errorf("no COPY of the module directory %s/", modDir)
	}
	var errs []error
	for _, r := range mf.Replace {
		if !modfile.IsDirectoryPath(r.New.Path) {
			continue
		}
		dir := path.Join(modDir, r.New.Path)
		if dir == ".." || strings.HasPrefix(dir, "../") {
			errs = append(errs, fmt.Errorf("go.mod replaces %s with %s, outside the repository (the build context)", r.Old.Path, r.New.Path))
			continue
		}
		want := path.Join(modDest, r.New.Path)
		if got, ok := dest[dir]; !ok || got != want {
			errs = append(errs, fmt.Errorf("go.mod replaces %s with %s: the build needs %s/ copied to %s, COPY puts it at %q",
				r.Old.Path, r.New.Path, dir, want, got))
		}
	}
	return errors.Join(errs...)
}
