package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/mod/modfile"
)

// service is what the deployment files are checked against, learned from
// the service itself and from its image.
type service struct {
	name string
	// reads maps each environment variable the binary reads to its
	// built-in default.
	reads map[string]string
	// image is the environment the image sets: the Dockerfile's ENV with
	// the build arguments docker-compose.yml gives this service.
	image map[string]string
	// exposed are the ports the image's EXPOSE names.
	exposed []string
}

// readsQueue reports whether the service works on the queue itself (every
// one but the console): it reads the ZooKeeper settings.
func (s *service) readsQueue() bool {
	_, ok := s.reads["INGESTQ_ZK_SERVERS"]
	return ok
}

// byName is the service of that name among services.
func byName(services []*service, name string) *service {
	return services[slices.IndexFunc(services, func(s *service) bool { return s.name == name })]
}

// defaultPort is the port of a listen variable's built-in default.
func (s *service) defaultPort(variable string) string {
	_, port, _ := net.SplitHostPort(s.reads[variable])
	return port
}

// effective is the environment a service runs with: the binary's
// defaults, then each layer in turn (the image's, the deployment's).
func (s *service) effective(layers ...map[string]string) map[string]string {
	env := maps.Clone(s.reads)
	for _, l := range append([]map[string]string{s.image}, layers...) {
		maps.Copy(env, l)
	}
	return env
}

// stopGrace is how long shared/service lets gRPC calls run on after the
// drain timeout: a runtime must wait longer than both before SIGKILL.
const stopGrace = 5 * time.Second

// entrypoint is the binary every image runs.
const entrypoint = "/usr/local/bin/ingestq"

func TestDeploymentFilesMatchTheServices(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := readCompose(filepath.Join(repo, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	df, err := readDockerfile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	services := make([]*service, len(stack.Binaries))
	t.Run("every image builds from what the Dockerfile copies, with the arguments docker-compose.yml gives it", func(t *testing.T) {
		for i, name := range stack.Binaries {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				svc, ok := cf.Services[name]
				if !ok || svc.Build == nil {
					t.Fatalf("docker-compose.yml builds no service %s", name)
				}
				if got := svc.Build.Args["SERVICE"]; got != name {
					t.Fatalf("docker-compose.yml: %s builds with SERVICE=%q", name, got)
				}
				services[i] = buildLikeDockerfile(t, repo, df, name, svc.Build.Args)
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("Dockerfile", func(t *testing.T) { checkDockerfile(t, repo, df, services) })
	t.Run("docker-compose.yml", func(t *testing.T) { checkCompose(t, repo, cf, services) })
	t.Run("deploy/k8s", func(t *testing.T) { checkKubernetes(t, repo, services) })
	t.Run("deploy/k8s-autoscaling", func(t *testing.T) { checkAutoscaling(t, repo, services) })
	t.Run("the deployment files run the concurrency docs/sizing.md gives", func(t *testing.T) { checkConcurrency(t, repo, cf, services) })
}

// dockerStage is one stage of a Dockerfile: its FROM and what follows.
type dockerStage struct {
	from  *parser.Node
	nodes []*parser.Node
}

func readDockerfile(file string) ([]dockerStage, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var stages []dockerStage
	for _, n := range res.AST.Children {
		switch {
		case is(n, "FROM"):
			stages = append(stages, dockerStage{from: n})
		case len(stages) > 0:
			stages[len(stages)-1].nodes = append(stages[len(stages)-1].nodes, n)
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM", file)
	}
	return stages, nil
}

func is(n *parser.Node, instruction string) bool { return strings.EqualFold(n.Value, instruction) }

// words are an instruction's arguments as the parser splits them.
func words(n *parser.Node) []string {
	var out []string
	for a := n.Next; a != nil; a = a.Next {
		out = append(out, a.Value)
	}
	return out
}

func stageNamed(stages []dockerStage, name string) *dockerStage {
	for i, st := range stages {
		if w := words(st.from); len(w) == 3 && strings.EqualFold(w[1], "AS") && w[2] == name {
			return &stages[i]
		}
	}
	return nil
}

// steps returns the stage's instructions of one kind.
func (st *dockerStage) steps(instruction string) []*parser.Node {
	var out []*parser.Node
	for _, n := range st.nodes {
		if is(n, instruction) {
			out = append(out, n)
		}
	}
	return out
}

// expander substitutes build arguments as the builder does: those the
// stage declares (ARG) take the given value or the default; any other
// reference is empty.
func (st *dockerStage) expander(args map[string]string) func(string) string {
	declared := map[string]string{}
	for _, n := range st.steps("ARG") {
		for _, w := range words(n) {
			name, def, _ := strings.Cut(w, "=")
			declared[name] = def
		}
	}
	return func(s string) string {
		return os.Expand(s, func(k string) string {
			if v, ok := args[k]; ok {
				if _, ok := declared[k]; ok {
					return v
				}
			}
			return declared[k]
		})
	}
}

// buildLikeDockerfile builds a service as the Dockerfile's build stage
// does with the service's build arguments, in a tree holding only what
// that stage copies from the context (less .dockerignore), then asks the
// binary what it reads.
func buildLikeDockerfile(t *testing.T, repo string, df []dockerStage, name string, args map[string]string) *service {
	build := stageNamed(df, "build")
	if build == nil {
		t.Fatal("Dockerfile: no stage named build")
	}
	ignore, err := readDockerignore(repo)
	if err != nil {
		t.Fatal(err)
	}
	expand := build.expander(args)
	root, workdir := t.TempDir(), "/"
	for _, n := range build.nodes {
		w := words(n)
		switch {
		case is(n, "WORKDIR"):
			workdir = resolve(workdir, expand(w[0]))
		case is(n, "COPY") && len(n.Flags) == 0:
			dest := resolve(workdir, expand(w[len(w)-1]))
			for _, src := range w[:len(w)-1] {
				if err := copyContext(repo, ignore, path.Clean(expand(src)), filepath.Join(root, dest)); err != nil {
					t.Fatalf("Dockerfile:%d: %v", n.StartLine, err)
				}
			}
		}
	}
	bin := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, workdir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Dockerfile, SERVICE=%s: building in %s with only the copied directories: %v\n%s", name, workdir, err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "-print-env-table").Output()
	if err != nil {
		t.Fatalf("%s -print-env-table: %v", name, err)
	}
	reads, err := parseEnvTable(out)
	if err != nil {
		t.Fatalf("%s -print-env-table: %v", name, err)
	}
	final := df[len(df)-1]
	expand = final.expander(args)
	image := map[string]string{}
	for _, n := range final.steps("ENV") {
		w := words(n) // name, value, separator: for each variable
		for i := 0; i+1 < len(w); i += 3 {
			image[w[i]] = strings.Trim(expand(w[i+1]), `"`)
		}
	}
	var exposed []string
	for _, n := range final.steps("EXPOSE") {
		for _, w := range words(n) {
			exposed = append(exposed, expand(w))
		}
	}
	return &service{name: name, reads: reads, image: image, exposed: exposed}
}

// resolve returns a container path p relative to the working directory.
func resolve(workdir, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(workdir, p)
}

func readDockerignore(repo string) (*patternmatcher.PatternMatcher, error) {
	f, err := os.Open(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return patternmatcher.New(patterns)
}

// copyContext copies src (a path in the build context) to dest as COPY
// does: a directory's contents, less what .dockerignore leaves out.
func copyContext(repo string, ignore *patternmatcher.PatternMatcher, src, dest string) error {
	if src == ".." || strings.HasPrefix(src, "../") || path.IsAbs(src) {
		return fmt.Errorf("COPY %s: outside the build context", src)
	}
	copied := 0
	err := filepath.WalkDir(filepath.Join(repo, src), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		if skip, err := ignore.MatchesOrParentMatches(filepath.ToSlash(rel)); err != nil || skip {
			return err
		}
		if d.IsDir() {
			return nil
		}
		inner, _ := filepath.Rel(filepath.Join(repo, src), p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		copied++
		target := filepath.Join(dest, inner)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err == nil && copied == 0 {
		err = fmt.Errorf("COPY %s: nothing in the build context", src)
	}
	return err
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
		reads[m[1]] = strings.Trim(strings.TrimPrefix(m[2], "(empty)"), "`")
	}
	if len(reads) == 0 {
		return nil, errors.New("no variable listed")
	}
	return reads, sc.Err()
}

// listening returns the listen variables env sets to an address, with
// the port each must use: the binary's default (its port everywhere).
func listening(s *service, env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if strings.HasSuffix(k, "_LISTEN") && v != "" {
			out[k] = s.defaultPort(k)
		}
	}
	return out
}

// listenCheck checks the listen addresses env sets: every address of the
// container, on the service's default port.
func listenCheck(s *service, env map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(listening(s, env))) {
		host, port, err := net.SplitHostPort(env[k])
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s=%q: %w", k, env[k], err))
		case host != "0.0.0.0" && host != "" && host != "::":
			errs = append(errs, fmt.Errorf("%s=%q: a container must listen on every address, not %s", k, env[k], host))
		case port != s.defaultPort(k):
			errs = append(errs, fmt.Errorf("%s=%q: port %s, but the service's default (used everywhere else) is %q", k, env[k], port, s.defaultPort(k)))
		}
	}
	return errors.Join(errs...)
}

// telemetryVariable reports whether name is one of the OpenTelemetry
// variables shared/telemetry reads (see its package documentation).
func telemetryVariable(name string) bool {
	switch name {
	case "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER":
		return true
	}
	return false
}

// awsVariable reports whether name is one of the standard AWS credential
// variables the S3 client of a service with the S3 store reads.
func (s *service) awsVariable(name string) bool {
	_, s3 := s.reads["INGESTQ_S3_ENDPOINT"]
	return s3 && slices.Contains([]string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"}, name)
}

// envCheck checks the variables a deployment gives a service: each must be
// one the binary reads, a telemetry variable, or one of helpers (used to
// compose the others).
func envCheck(s *service, env map[string]string, helpers ...string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if _, ok := s.reads[k]; ok || telemetryVariable(k) || slices.Contains(helpers, k) || s.awsVariable(k) {
			continue
		}
		errs = append(errs, fmt.Errorf("sets %s, which the %s binary does not read (-print-env-table)", k, s.name))
	}
	return errors.Join(errs...)
}

// drainTimeout is a service's INGESTQ_DRAIN_TIMEOUT in env.
func drainTimeout(env map[string]string) (time.Duration, error) {
	d, err := time.ParseDuration(env["INGESTQ_DRAIN_TIMEOUT"])
	if err != nil {
		return 0, fmt.Errorf("INGESTQ_DRAIN_TIMEOUT: %w", err)
	}
	return d, nil
}

// mountedCheck checks that every file or directory the service writes or
// reads (env, defaults included) lies under one of mounts.
func mountedCheck(s *service, env map[string]string, mounts []string) error {
	var errs []error
	for _, k := range []string{"INGESTQ_WORK_ROOT", "INGESTQ_STORE_ROOT", "INGESTQ_OUTBOX_DIR", "INGESTQ_PROFILES_DIR",
		"INGESTQ_INVENTORY_DB", "INGESTQ_ADMIN_TOKEN_FILE", "INGESTQ_CONSOLE_KEY_FILE"} {
		if _, reads := s.reads[k]; !reads || env[k] == "" {
			continue
		}
		p := path.Clean(env[k])
		if !slices.ContainsFunc(mounts, func(m string) bool { return p == m || strings.HasPrefix(p, m+"/") }) {
			errs = append(errs, fmt.Errorf("%s=%s is on no volume (mounted: %v)", k, env[k], mounts))
		}
	}
	return errors.Join(errs...)
}

func checkDockerfile(t *testing.T, repo string, df []dockerStage, services []*service) {
	build, final := stageNamed(df, "build"), &df[len(df)-1]
	t.Run("builds with the Go the modules name and ships distroless static as user 65532", func(t *testing.T) {
		for _, s := range services {
			gomod := filepath.Join(repo, "services", s.name, "go.mod")
			b, err := os.ReadFile(gomod)
			if err != nil {
				t.Fatal(err)
			}
			mf, err := modfile.ParseLax(gomod, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			minor := strings.Join(strings.SplitN(mf.Go.Version, ".", 3)[:2], ".")
			if from := words(build.from)[0]; !strings.HasPrefix(from, "golang:"+minor+"-") {
				t.Errorf("build stage FROM %s, but services/%s/go.mod asks for go %s", from, s.name, mf.Go.Version)
			}
		}
		if from := words(final.from)[0]; from != "gcr.io/distroless/static-debian12:nonroot" {
			t.Errorf("final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot", from)
		}
		if users := final.steps("USER"); len(users) == 0 || !slices.Contains([]string{"65532", "65532:65532"}, words(users[len(users)-1])[0]) {
			t.Error("the final stage's USER is not 65532 (nonroot, numeric so that runAsNonRoot can verify it)")
		}
	})
	t.Run("starts the binary it built and health-checks it with -check-health", func(t *testing.T) {
		var goBuild string
		for _, n := range build.steps("RUN") {
			if run := strings.Join(words(n), " "); strings.Contains(run, "go build") {
				goBuild = run
			}
		}
		for _, want := range []string{"CGO_ENABLED=0", "GOWORK=off"} {
			if !strings.Contains(goBuild, want) {
				t.Errorf("the build stage's go build %q lacks %s", goBuild, want)
			}
		}
		copied := slices.ContainsFunc(final.steps("COPY"), func(n *parser.Node) bool {
			w := words(n)
			return slices.Contains(n.Flags, "--from=build") && len(w) == 2 && w[1] == entrypoint && strings.Contains(goBuild+" ", " -o "+w[0]+" ")
		})
		if !copied {
			t.Errorf("no COPY --from=build of go build's output to %s", entrypoint)
		}
		if e := final.steps("ENTRYPOINT"); len(e) != 1 || !e[0].Attributes["json"] || !slices.Equal(words(e[0]), []string{entrypoint}) {
			t.Errorf("want one ENTRYPOINT [%q]", entrypoint)
		}
		if hc := final.steps("HEALTHCHECK"); len(hc) != 1 || !slices.Equal(words(hc[0]), []string{"CMD", entrypoint, "-check-health"}) {
			t.Errorf("want one HEALTHCHECK CMD [%q, \"-check-health\"] (exec form: the image has no shell)", entrypoint)
		}
	})
	t.Run("listens on every address at the default gRPC and metrics ports, exposes them, and sets only variables the binary reads", func(t *testing.T) {
		for _, s := range services {
			var errs []error
			for _, k := range []string{"INGESTQ_LISTEN", "INGESTQ_METRICS_LISTEN"} {
				if s.image[k] == "" {
					errs = append(errs, fmt.Errorf("does not set %s (the default listens on 127.0.0.1 only)", k))
				}
			}
			if want := slices.Sorted(maps.Values(listening(s, s.image))); !slices.Equal(slices.Sorted(slices.Values(s.exposed)), want) {
				errs = append(errs, fmt.Errorf("EXPOSE %v, want the ports it listens on, %v", s.exposed, want))
			}
			if err := errors.Join(append(errs, listenCheck(s, s.image), envCheck(s, s.image))...); err != nil {
				t.Errorf("SERVICE=%s: %v", s.name, err)
			}
		}
	})
}
