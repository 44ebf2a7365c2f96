package docs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ingestq/ingestq/shared/profile"
)

// overlayFile is the first line of a block of docs/kubernetes.md that is a
// file of the reader's overlay: its path, and whether it adds to a file
// shown before (the overlay's kustomization).
var overlayFile = regexp.MustCompile(`^# (deploy/mysite/[a-z0-9.-]+)(, added)?$`)

// rendered are the objects kustomize made of the overlay.
type rendered struct {
	configMaps   []*corev1.ConfigMap
	claims       []*corev1.PersistentVolumeClaim
	services     []*corev1.Service
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	cronJobs     []*batchv1.CronJob
}

// TestTheKubernetesPageBuildsAndDoesWhatItSays writes every file of
// docs/kubernetes.md's overlay beside a copy of deploy/k8s, builds it with
// kustomize, decodes every object strictly into its API type, and checks
// what each section says it does.
func TestTheKubernetesPageBuildsAndDoesWhatItSays(t *testing.T) {
	pages := docFiles(t)
	page := pages["docs/kubernetes.md"]
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "deploy", "k8s"), os.DirFS(filepath.Join(repo, "deploy", "k8s"))); err != nil {
		t.Fatal(err)
	}
	files := map[string]map[string]any{}
	written := 0
	for _, block := range fencedBlocks(page, "yaml") {
		first, body, _ := strings.Cut(block, "\n")
		m := overlayFile.FindStringSubmatch(strings.TrimSpace(first))
		if m == nil {
			continue
		}
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("docs/kubernetes.md: %s: %v", m[1], err)
		}
		if m[2] != "" {
			base, ok := files[m[1]]
			if !ok {
				t.Fatalf("docs/kubernetes.md adds to %s before showing it", m[1])
			}
			for k, v := range doc {
				list, _ := base[k].([]any)
				more, _ := v.([]any)
				base[k] = append(list, more...)
			}
			doc = base
		}
		files[m[1]] = doc
		written++
	}
	if written == 0 {
		t.Fatal("docs/kubernetes.md shows no file of deploy/mysite")
	}
	for name, doc := range files {
		data, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := renderOverlay(t, filepath.Join(dir, "deploy", "mysite"))

	t.Run("profiles", func(t *testing.T) { checkProfiles(t, r, page) })
	t.Run("secrets", func(t *testing.T) { checkSecretFiles(t, r, pages) })
	t.Run("settings", func(t *testing.T) { checkOverlaySettings(t, r) })
	t.Run("backup", func(t *testing.T) { checkBackupCronJob(t, r, page) })
}

// fencedBlocks are the bodies of a Markdown text's fenced blocks of one
// language.
func fencedBlocks(text, lang string) []string {
	var out []string
	var body []string
	in, this, indent := false, false, ""
	for line := range strings.Lines(text) {
		if m := fence.FindStringSubmatch(line); m != nil {
			if !in {
				in, this, body = true, m[1] == lang, nil
				indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
				continue
			}
			in = false
			if this {
				out = append(out, strings.Join(body, ""))
			}
			continue
		}
		if in {
			body = append(body, strings.TrimPrefix(line, indent))
		}
	}
	return out
}

// renderOverlay builds a kustomization and decodes its objects strictly.
func renderOverlay(t *testing.T, dir string) *rendered {
	t.Helper()
	bin := cmp.Or(os.Getenv("INGESTQ_KUSTOMIZE"), filepath.Join(repo, "bin", "kustomize"))
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s build (make deps installs kustomize into bin/): %v\n%s", bin, err, stderr.Bytes())
	}
	r := &rendered{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return r
		} else if err != nil {
			t.Fatal(err)
		}
		switch kind := fmt.Sprintf("%v/%v", doc["apiVersion"], doc["kind"]); kind {
		case "v1/ConfigMap":
			err = strictInto(doc, &r.configMaps)
		case "v1/PersistentVolumeClaim":
			err = strictInto(doc, &r.claims)
		case "v1/Service":
			err = strictInto(doc, &r.services)
		case "apps/v1/Deployment":
			err = strictInto(doc, &r.deployments)
		case "apps/v1/StatefulSet":
			err = strictInto(doc, &r.statefulSets)
		case "batch/v1/CronJob":
			err = strictInto(doc, &r.cronJobs)
		case "v1/Namespace", "policy/v1/PodDisruptionBudget":
		default:
			err = fmt.Errorf("kind %s is not one this test knows", kind)
		}
		if err != nil {
			t.Fatalf("%v %v: %v", doc["kind"], doc["metadata"], err)
		}
	}
}

// strictInto decodes doc into a new T, refusing unknown fields, and
// appends it to list.
func strictInto[T any](doc map[string]any, list *[]*T) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	obj := new(T)
	if err := dec.Decode(obj); err != nil {
		return err
	}
	*list = append(*list, obj)
	return nil
}

// restartCommand is a command that restarts Deployments.
var restartCommand = regexp.MustCompile(`kubectl -n ingestq rollout restart((?: deployment/[a-z]+)+)`)

// checkProfiles: every profile of the ConfigMap loads, and the page
// restarts exactly the Deployments that mount it.
func checkProfiles(t *testing.T, r *rendered, page string) {
	dir := t.TempDir()
	for _, cm := range r.configMaps {
		if cm.Name != "ingestq-profiles" {
			continue
		}
		if len(cm.Data) < 2 {
			t.Errorf("ingestq-profiles holds %d profile(s): the page's was not added beside the demo's", len(cm.Data))
		}
		for key, text := range cm.Data {
			os.WriteFile(filepath.Join(dir, key), []byte(text), 0o644)
		}
	}
	if _, err := profile.Load(dir); err != nil {
		t.Errorf("the profiles do not load: %v", err)
	}
	var mounting []string
	for _, d := range r.deployments {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == "ingestq-profiles" {
				mounting = append(mounting, d.Name)
			}
		}
	}
	m := restartCommand.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("docs/kubernetes.md restarts no Deployment after adding a profile")
	}
	var restarted []string
	for _, f := range strings.Fields(m[1]) {
		restarted = append(restarted, strings.TrimPrefix(f, "deployment/"))
	}
	slices.Sort(mounting)
	slices.Sort(restarted)
	if !slices.Equal(mounting, restarted) {
		t.Errorf("the page restarts %v; the Deployments that read the profiles are %v", restarted, mounting)
	}
}

// secretCommand is a command of the pages that creates a Secret: its name
// and the keys it holds.
var secretCommand = regexp.MustCompile(`kubectl -n ingestq create secret generic ([a-z0-9-]+)((?: --from-(?:file|literal)=[A-Za-z0-9_.-]+=\S*)+)`)

// checkSecretFiles: each setting that names a file (…_FILE) in a container
// names a key of a Secret mounted there, and some page creates that
// Secret with that key.
func checkSecretFiles(t *testing.T, r *rendered, pages map[string]string) {
	created := map[string][]string{}
	for _, text := range pages {
		for _, m := range secretCommand.FindAllStringSubmatch(text, -1) {
			for _, f := range strings.Fields(m[2]) {
				key, _, _ := strings.Cut(f[strings.Index(f, "=")+1:], "=")
				created[m[1]] = append(created[m[1]], key)
			}
		}
	}
	checked := 0
	for _, pod := range podSpecs(r) {
		secrets := map[string]string{}
		for _, v := range pod.spec.Volumes {
			if v.Secret != nil {
				secrets[v.Name] = v.Secret.SecretName
			}
		}
		for _, c := range pod.spec.Containers {
			for _, e := range c.Env {
				if !strings.HasSuffix(e.Name, "_FILE") || e.Value == "" {
					continue
				}
				mount, rel := mountOf(c, e.Value)
				secret, ok := secrets[mount]
				if !ok {
					t.Errorf("%s: %s=%s is not in a Secret's volume", pod.name, e.Name, e.Value)
					continue
				}
				checked++
				if !slices.Contains(created[secret], rel) {
					t.Errorf("%s: %s reads key %s of Secret %s, which no page creates with that key (pages create %v)", pod.name, e.Name, rel, secret, created)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no setting names a file of a Secret")
	}
}

// checkOverlaySettings: every INGESTQ_ setting of a Deployment is one its
// program reads (the container's name is the program's).
func checkOverlaySettings(t *testing.T, r *rendered) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range r.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			out, err := exec.CommandContext(ctx, filepath.Join(builtServices(t), c.Name), "-print-env-table").Output()
			if err != nil {
				t.Fatalf("%s -print-env-table: %v", c.Name, err)
			}
			reads, _ := parseTable(string(out))
			for _, e := range c.Env {
				if _, ok := reads[e.Name]; strings.HasPrefix(e.Name, "INGESTQ_") && !ok {
					t.Errorf("Deployment %s sets %s, which %s does not read", d.Name, e.Name, c.Name)
				}
			}
		}
	}
}

// flagArg is an argument of the backup's command: -name=value.
var flagArg = regexp.MustCompile(`^-([a-z-]+)=(.*)$`)

// checkBackupCronJob: the CronJob is a pod the restricted namespace
// admits, on the node of the ReadWriteOnce volumes it mounts; its command
// is ingestq-backup create with flags the tool has, reaching the batcher's
// and ZooKeeper's Services, and with the paths the services and ZooKeeper
// use on the same volumes; its image is the one the page builds.
func checkBackupCronJob(t *testing.T, r *rendered, page string) {
	if len(r.cronJobs) != 1 {
		t.Fatalf("%d CronJobs, want the backup's", len(r.cronJobs))
	}
	cj := r.cronJobs[0]
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("the backup's pod has %d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	restrictedPod(t, "backup", pod)

	// The image: what the page's Dockerfile builds.
	if !regexp.MustCompile(`docker build -f (\S+) -t ` + regexp.QuoteMeta(c.Image) + ` \.`).MatchString(page) {
		t.Errorf("the CronJob runs %s, which the page does not build", c.Image)
	}
	checkBackupDockerfile(t, page)

	// The command.
	if len(c.Args) == 0 || c.Args[0] != "create" {
		t.Fatalf("the backup runs %v, not ingestq-backup create", c.Args)
	}
	help := backupHelp(t, "create")
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		m := flagArg.FindStringSubmatch(a)
		if m == nil || !strings.Contains(help, "  -"+m[1]+" ") && !strings.Contains(help, "  -"+m[1]+"\n") {
			t.Errorf("argument %q is not a flag of ingestq-backup create", a)
			continue
		}
		flags[m[1]] = m[2]
	}
	svc := map[string]corev1.Service{}
	for _, s := range r.services {
		svc[s.Name] = *s
	}
	host, port, _ := strings.Cut(flags["batcher"], ":")
	if !servesPort(svc[host], port) {
		t.Errorf("-batcher=%s: no Service %s with port %s", flags["batcher"], host, port)
	}
	var zk *appsv1.StatefulSet
	for _, s := range r.statefulSets {
		if s.Name == "zk" {
			zk = s
		}
	}
	if zk == nil {
		t.Fatal("no ZooKeeper StatefulSet")
	}
	servers := strings.Split(flags["zk-servers"], ",")
	if len(servers) != int(*zk.Spec.Replicas) {
		t.Errorf("-zk-servers names %d servers; the ensemble has %d", len(servers), *zk.Spec.Replicas)
	}
	for i, s := range servers {
		if want := fmt.Sprintf("zk-%d.%s:2181", i, zk.Spec.ServiceName); s != want {
			t.Errorf("-zk-servers: %s, want %s", s, want)
		}
	}

	// The paths: on the volume each service or server uses, where it does.
	claimOf := map[string]string{}
	readOnly := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claimOf[v.Name] = v.PersistentVolumeClaim.ClaimName
			readOnly[v.Name] = v.PersistentVolumeClaim.ReadOnly
		}
		if v.Secret != nil {
			claimOf[v.Name] = "secret " + v.Secret.SecretName
		}
	}
	at := func(flag string) (claim, rel string) {
		mount, rel := mountOf(c, flags[flag])
		return claimOf[mount], rel
	}
	zkClaim := fmt.Sprintf("%s-%s-0", zk.Spec.VolumeClaimTemplates[0].Name, zk.Name)
	zkc := zk.Spec.Template.Spec.Containers[0]
	zkMount := zkc.VolumeMounts[0]
	zkEnv := envMap(zkc)
	dataDir := cmp.Or(zkEnv["ZOO_DATA_DIR"], "/data") // the image's default
	for flag, dir := range map[string]string{"zk-data": dataDir, "zk-datalog": cmp.Or(zkEnv["ZOO_DATA_LOG_DIR"], dataDir)} {
		want := strings.Trim(strings.TrimPrefix(dir, zkMount.MountPath), "/")
		if claim, rel := at(flag); claim != zkClaim || rel != want {
			t.Errorf("-%s=%s: on %s at %q; ZooKeeper keeps it on %s at %q", flag, flags[flag], claim, rel, zkClaim, want)
		}
	}
	if mount, _ := mountOf(c, flags["zk-data"]); !readOnly[mount] {
		t.Errorf("ZooKeeper's volume is mounted writable")
	}
	recorder := deployment(r, "recorder")
	batcher := deployment(r, "batcher")
	for flag, where := range map[string]struct {
		d       *appsv1.Deployment
		setting string
		def     string
	}{
		"inventory": {recorder, "INGESTQ_INVENTORY_DB", ""},
		"work":      {batcher, "INGESTQ_WORK_ROOT", "/var/lib/ingestq/work"},
		"store":     {batcher, "INGESTQ_STORE_ROOT", "/var/lib/ingestq/store"},
	} {
		sc := where.d.Spec.Template.Spec.Containers[0]
		p := cmp.Or(envMap(sc)[where.setting], where.def)
		mount, rel := mountOf(sc, p)
		wantClaim := ""
		for _, v := range where.d.Spec.Template.Spec.Volumes {
			if v.Name == mount && v.PersistentVolumeClaim != nil {
				wantClaim = v.PersistentVolumeClaim.ClaimName
			}
		}
		if claim, got := at(flag); claim != wantClaim || got != rel {
			t.Errorf("-%s=%s: on %s at %q; %s has %s on %s at %q", flag, flags[flag], claim, got, where.d.Name, where.setting, wantClaim, rel)
		}
	}
	if claim, rel := at("token-file"); claim != "secret ingestq-admin-token" || rel != "token" {
		t.Errorf("-token-file=%s: %s, key %s; want the admin token's Secret, key token", flags["token-file"], claim, rel)
	}
	if claim, _ := at("out"); claim == "" || !strings.Contains(flags["out"], "$(POD_NAME)") || !hasFieldEnv(c, "POD_NAME", "metadata.name") {
		t.Errorf("-out=%s: each run's backup must go to a folder of its own (the pod's name) on a volume", flags["out"])
	}

	// The ReadWriteOnce volumes: the pod runs where zk-0 runs, and so does
	// the recorder, which mounts the inventory's.
	if !affineTo(pod, "zk-0") {
		t.Error("the backup's pod is not required on zk-0's node, where data-zk-0 is mounted")
	}
	if !affineTo(recorder.Spec.Template.Spec, "zk-0") {
		t.Error("the recorder is not required on zk-0's node, where the backup mounts its inventory")
	}
}

// checkBackupDockerfile builds ingestq-backup as the page's Dockerfile
// does: from a context of exactly what it copies (less .dockerignore), the
// module alone (GOWORK=off).
func checkBackupDockerfile(t *testing.T, page string) {
	blocks := fencedBlocks(page, "dockerfile")
	if len(blocks) != 1 {
		t.Fatalf("docs/kubernetes.md has %d Dockerfiles, want the backup image's", len(blocks))
	}
	ctxDir := t.TempDir()
	workdir := "/"
	var build string
	for line := range strings.Lines(blocks[0]) {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "COPY" && !strings.HasPrefix(f[1], "--from"):
			src := filepath.Join(repo, filepath.FromSlash(f[1]))
			dst := filepath.Join(ctxDir, filepath.FromSlash(path.Join(workdir, f[2])))
			if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
				t.Fatalf("COPY %s: %v", f[1], err)
			}
		case len(f) == 2 && f[0] == "WORKDIR":
			workdir = f[1]
		case len(f) > 1 && f[0] == "RUN" && build == "":
			build = strings.Join(f[1:], " ")
			dir := filepath.Join(ctxDir, filepath.FromSlash(workdir))
			build = strings.Replace(build, "-o /out/", "-o "+filepath.Join(t.TempDir(), "out")+"/", 1)
			cmd := exec.Command("bash", "-c", build)
			cmd.Dir = dir
			// The image's Go build: the module cache and build cache are
			// the machine's; nothing else of the repository is there.
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the Dockerfile's build (%s) fails in a context of what it copies: %v\n%s", build, err, out)
			}
		}
	}
	if build == "" {
		t.Error("the Dockerfile builds nothing")
	}
	ignore, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(ignore)) {
		pattern := strings.TrimSuffix(strings.TrimSpace(line), "/")
		if pattern == "" || strings.HasPrefix(pattern, "#") || strings.Contains(pattern, "*") {
			continue
		}
		for _, src := range []string{"proto", "shared", "tools/ingestq-backup", "tools"} {
			if src == pattern && strings.Contains(blocks[0], "COPY "+src) {
				t.Errorf(".dockerignore leaves %s out of the build context the Dockerfile copies", src)
			}
		}
	}
}

// backupHelp is ingestq-backup's usage of a command.
func backupHelp(t *testing.T, command string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ingestq-backup")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(repo, "tools", "ingestq-backup")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ingestq-backup: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, command, "-h").CombinedOutput()
	return string(out)
}

type namedPod struct {
	name string
	spec corev1.PodSpec
}

func podSpecs(r *rendered) []namedPod {
	var out []namedPod
	for _, d := range r.deployments {
		out = append(out, namedPod{"Deployment " + d.Name, d.Spec.Template.Spec})
	}
	for _, c := range r.cronJobs {
		out = append(out, namedPod{"CronJob " + c.Name, c.Spec.JobTemplate.Spec.Template.Spec})
	}
	return out
}

func deployment(r *rendered, name string) *appsv1.Deployment {
	for _, d := range r.deployments {
		if d.Name == name {
			return d
		}
	}
	panic("no Deployment " + name)
}

// mountOf finds the volume a container path is on, and the path within it.
func mountOf(c corev1.Container, p string) (volume, rel string) {
	best := -1
	for _, m := range c.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (p == mp || strings.HasPrefix(p, mp+"/")) && len(mp) > best {
			best, volume, rel = len(mp), m.Name, strings.TrimPrefix(strings.TrimPrefix(p, mp), "/")
		}
	}
	return volume, rel
}

func envMap(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func hasFieldEnv(c corev1.Container, name, field string) bool {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == field {
			return true
		}
	}
	return false
}

func servesPort(s corev1.Service, port string) bool {
	for _, p := range s.Spec.Ports {
		if fmt.Sprint(p.Port) == port {
			return true
		}
	}
	return false
}

// affineTo says whether a pod must run on the node of the pod named.
func affineTo(pod corev1.PodSpec, podName string) bool {
	if pod.Affinity == nil || pod.Affinity.PodAffinity == nil {
		return false
	}
	for _, term := range pod.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey == "kubernetes.io/hostname" && term.LabelSelector != nil &&
			term.LabelSelector.MatchLabels["statefulset.kubernetes.io/pod-name"] == podName {
			return true
		}
	}
	return false
}

// restrictedPod: what the restricted Pod Security Standard of the
// namespace asks of a pod.
func restrictedPod(t *testing.T, name string, pod corev1.PodSpec) {
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: the pod must run as non-root with the runtime's seccomp profile", name)
	}
	for _, c := range pod.Containers {
		csc := c.SecurityContext
		if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container %s must drop every capability and allow no privilege escalation", name, c.Name)
		}
	}
}
