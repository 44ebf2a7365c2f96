package deploy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// operatorSecret reports whether the manifests may use the Secret name
// without holding it: the operator creates it (docs/deploy.md says how).
func operatorSecret(name string) bool {
	return name == "ingestq-admin-token" || name == "ingestq-console-key"
}

// manifests are the objects kustomize renders, by kind.
type manifests struct {
	namespaced   []metav1.Object
	namespaces   []*corev1.Namespace
	configMaps   []*corev1.ConfigMap
	claims       []*corev1.PersistentVolumeClaim
	services     []*corev1.Service
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	budgets      []*policyv1.PodDisruptionBudget
	ingresses    []*networkingv1.Ingress
	scaled       []*scaledObject
}

// render builds a kustomization of the repository with the kustomize
// make deps installs, and decodes every object into its API type, refusing
// unknown kinds and fields (what a cluster would reject, and misspellings
// lenient clients drop).
func render(t *testing.T, repo, dir string) *manifests {
	t.Helper()
	bin := cmp.Or(os.Getenv("INGESTQ_KUSTOMIZE"), filepath.Join(repo, "bin", "kustomize"))
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "build", filepath.Join(repo, dir))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s build %s (make deps installs kustomize into bin/): %v\n%s", bin, dir, err, stderr.Bytes())
	}
	m := &manifests{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return m
		} else if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if err := m.add(doc); err != nil {
			t.Fatalf("%s: %v %v: %v", dir, doc["kind"], doc["metadata"], err)
		}
	}
}

func (m *manifests) add(doc map[string]any) error {
	var obj metav1.Object
	var err error
	switch kind := fmt.Sprintf("%v/%v", doc["apiVersion"], doc["kind"]); kind {
	case "v1/Namespace":
		_, err = decodeInto(doc, &m.namespaces)
		return err
	case "v1/ConfigMap":
		obj, err = decodeInto(doc, &m.configMaps)
	case "v1/PersistentVolumeClaim":
		obj, err = decodeInto(doc, &m.claims)
	case "v1/Service":
		obj, err = decodeInto(doc, &m.services)
	case "apps/v1/Deployment":
		obj, err = decodeInto(doc, &m.deployments)
	case "apps/v1/StatefulSet":
		obj, err = decodeInto(doc, &m.statefulSets)
	case "policy/v1/PodDisruptionBudget":
		obj, err = decodeInto(doc, &m.budgets)
	case "networking.k8s.io/v1/Ingress":
		obj, err = decodeInto(doc, &m.ingresses)
	case "keda.sh/v1alpha1/ScaledObject":
		obj, err = decodeInto(doc, &m.scaled)
	default:
		return fmt.Errorf("kind %s is not one this test knows", kind)
	}
	m.namespaced = append(m.namespaced, obj)
	return err
}

// decodeInto decodes doc strictly into a new T and appends it to list.
func decodeInto[T any, PT interface {
	*T
	metav1.Object
}](doc map[string]any, list *[]PT) (PT, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	obj := PT(new(T))
	if err := dec.Decode(obj); err != nil {
		return nil, err
	}
	*list = append(*list, obj)
	return obj, nil
}

// selects reports whether a matchLabels selector selects pods labelled labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// containerPort resolves a port by number or name among a container's ports.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// routed reports whether Service sp routes a port to the container's port.
func routed(sp corev1.ServicePort, c corev1.Container, port string) bool {
	target := sp.TargetPort
	if target.Type == intstr.Int && target.IntVal == 0 {
		target = intstr.FromInt32(sp.Port)
	}
	cp, ok := containerPort(c, target)
	return ok && strconv.Itoa(int(cp)) == port
}

// reference matches $(NAME), the way a variable uses an earlier one.
var reference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func checkKubernetes(t *testing.T, repo string, services []*service) {
	m := render(t, repo, "deploy/k8s")

	t.Run("every object is in the one declared namespace", func(t *testing.T) {
		if len(m.namespaces) != 1 {
			t.Fatalf("%d Namespaces, want 1", len(m.namespaces))
		}
		for _, o := range m.namespaced {
			if o.GetNamespace() != m.namespaces[0].Name {
				t.Errorf("%s is in namespace %q", o.GetName(), o.GetNamespace())
			}
		}
	})

	t.Run("the profiles ConfigMap holds the files of examples/profiles as they are", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(repo, "examples", "profiles", "*.y*ml"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want[filepath.Base(f)] = string(b)
		}
		i := slices.IndexFunc(m.configMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == "ingestq-profiles" })
		if i < 0 || !maps.Equal(m.configMaps[i].Data, want) {
			t.Errorf("no ConfigMap ingestq-profiles holding %v as they are", slices.Sorted(maps.Keys(want)))
		}
	})

	t.Run("every volume a pod mounts is declared and every claim, ConfigMap and Secret it names exists", func(t *testing.T) {
		for _, d := range m.deployments {
			if err := volumesCheck(m, d.Spec.Template.Spec, nil); err != nil {
				t.Errorf("Deployment %s: %v", d.Name, err)
			}
		}
		for _, s := range m.statefulSets {
			var claimed []string
			for _, ct := range s.Spec.VolumeClaimTemplates {
				claimed = append(claimed, ct.Name)
			}
			if err := volumesCheck(m, s.Spec.Template.Spec, claimed); err != nil {
				t.Errorf("StatefulSet %s: %v", s.Name, err)
			}
		}
	})

	zkClient := checkZooKeeper(t, m)

	checks := []struct {
		name  string
		check func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error
	}{
		{"sets only variables the binary reads", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			var helpers []string
			for _, e := range c.Env {
				for _, ref := range reference.FindAllStringSubmatch(e.Value, -1) {
					helpers = append(helpers, ref[1])
				}
			}
			return envCheck(s, envOf(c), helpers...)
		}},
		{"listens on every address at the default ports, each declared and routed by a Service", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			errs := []error{listenCheck(s, env)}
			for k, port := range listening(s, env) {
				p, _ := strconv.Atoi(port)
				if _, ok := containerPort(c, intstr.FromInt32(int32(p))); !ok {
					errs = append(errs, fmt.Errorf("the container does not declare port %s (%s)", port, k))
				}
				if !slices.ContainsFunc(m.services, func(svc *corev1.Service) bool {
					return selects(svc.Spec.Selector, d.Spec.Template.Labels) &&
						slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return routed(sp, c, port) })
				}) {
					errs = append(errs, fmt.Errorf("no Service routes port %s (%s) to the pods", port, k))
				}
			}
			return errors.Join(errs...)
		}},
		{"a console on several replicas signs sessions with one key", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			if env["INGESTQ_CONSOLE_LISTEN"] != "" && (d.Spec.Replicas == nil || *d.Spec.Replicas > 1) && env["INGESTQ_CONSOLE_KEY_FILE"] == "" {
				return errors.New("serves the console from several replicas without INGESTQ_CONSOLE_KEY_FILE: a sign-in would hold on one replica only")
			}
			return nil
		}},
		{"reaches the batcher's gRPC port through the batcher's Service", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			if _, reads := s.reads["INGESTQ_BATCHER_ADDR"]; !reads {
				return nil
			}
			batcher := byName(services, "batcher")
			bd, bc, err := stageDeployment(m, batcher)
			if err != nil {
				return err
			}
			host, port, err := net.SplitHostPort(env["INGESTQ_BATCHER_ADDR"])
			if err != nil || !slices.ContainsFunc(m.services, func(svc *corev1.Service) bool {
				return (host == svc.Name || host == svc.Name+"."+svc.Namespace) && selects(svc.Spec.Selector, bd.Spec.Template.Labels) &&
					slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
						return strconv.Itoa(int(sp.Port)) == port && routed(sp, bc, batcher.defaultPort("INGESTQ_LISTEN"))
					})
			}) {
				return fmt.Errorf("INGESTQ_BATCHER_ADDR %q: no Service of that name routes that port to the batcher's gRPC port", env["INGESTQ_BATCHER_ADDR"])
			}
			return nil
		}},
		{"gRPC startup, readiness and liveness probes ask the gRPC port", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			var errs []error
			for name, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
				if p == nil || p.GRPC == nil || strconv.Itoa(int(p.GRPC.Port)) != s.defaultPort("INGESTQ_LISTEN") {
					errs = append(errs, fmt.Errorf("%s is not a gRPC probe of port %s", name, s.defaultPort("INGESTQ_LISTEN")))
				}
			}
			return errors.Join(errs...)
		}},
		{"Prometheus scrapes the metrics port", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			ann := d.Spec.Template.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != s.defaultPort("INGESTQ_METRICS_LISTEN") || ann["prometheus.io/path"] != "/metrics" {
				return fmt.Errorf("pod annotations %v, want prometheus.io/scrape true, port %s, path /metrics", ann, s.defaultPort("INGESTQ_METRICS_LISTEN"))
			}
			return nil
		}},
		{"connects to ZooKeeper through its client Service, or (the console) not at all", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			if !s.readsQueue() {
				return nil // it is given only what it reads
			}
			host, port, err := net.SplitHostPort(env["INGESTQ_ZK_SERVERS"])
			if zkClient == nil || err != nil || port != "2181" || host != zkClient.Name && host != zkClient.Name+"."+zkClient.Namespace {
				return fmt.Errorf("INGESTQ_ZK_SERVERS %q, want the ZooKeeper client Service on 2181 (its address stays when ZooKeeper pods move)", env["INGESTQ_ZK_SERVERS"])
			}
			return nil
		}},
		{"outlasts a drain: the grace period before SIGKILL and the liveness failure window", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			drain, err := drainTimeout(env)
			if err != nil {
				return err
			}
			var errs []error
			if grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= drain+stopGrace {
				errs = append(errs, fmt.Errorf("terminationGracePeriodSeconds %v, want more than the drain timeout %s plus %s", grace, drain, stopGrace))
			}
			// Health turns NOT_SERVING while draining: liveness must not
			// kill a pod that drains.
			if p := c.LivenessProbe; p != nil && time.Duration(cmp.Or(p.PeriodSeconds, 10)*cmp.Or(p.FailureThreshold, 3))*time.Second <= drain {
				errs = append(errs, fmt.Errorf("liveness gives up within the drain timeout %s", drain))
			}
			return errors.Join(errs...)
		}},
		{"requests and limits CPU and memory", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, hasReq := c.Resources.Requests[res]
				lim, hasLim := c.Resources.Limits[res]
				if !hasReq || !hasLim || req.Cmp(lim) > 0 {
					return fmt.Errorf("%s: request %s, limit %s; want both, the request within the limit", res, req.String(), lim.String())
				}
			}
			return nil
		}},
		{"runs non-root without privileges on a read-only root file system", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			return restrictedCheck(d.Spec.Template.Spec, c, true)
		}},
		{"keeps every path it uses on a volume", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			var mounts []string
			for _, vm := range c.VolumeMounts {
				mounts = append(mounts, path.Clean(vm.MountPath))
			}
			return mountedCheck(s, env, mounts)
		}},
		{"names its traces after the stage and the pod (OTEL_*)", func(s *service, d *appsv1.Deployment, c corev1.Container, env map[string]string) error {
			return otelCheck(s, d, c)
		}},
	}
	for _, ch := range checks {
		t.Run(ch.name, func(t *testing.T) {
			for _, s := range services {
				d, c, err := stageDeployment(m, s)
				if err == nil {
					err = ch.check(s, d, c, s.effective(envOf(c)))
				}
				if err != nil {
					t.Errorf("%s: %v", s.name, err)
				}
			}
		})
	}

	t.Run("deploy/k8s-console-ingress routes its host to the console", func(t *testing.T) {
		withIngress := render(t, repo, "deploy/k8s-console-ingress")
		s := byName(services, "console")
		d, c, err := stageDeployment(withIngress, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(withIngress.ingresses) != 1 {
			t.Fatalf("%d Ingresses, want 1", len(withIngress.ingresses))
		}
		for _, r := range withIngress.ingresses[0].Spec.Rules {
			for _, p := range r.HTTP.Paths {
				b := p.Backend.Service
				if b == nil || !slices.ContainsFunc(withIngress.services, func(svc *corev1.Service) bool {
					return svc.Name == b.Name && selects(svc.Spec.Selector, d.Spec.Template.Labels) &&
						slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
							return (sp.Name == b.Port.Name && b.Port.Name != "" || sp.Port == b.Port.Number) && routed(sp, c, s.defaultPort("INGESTQ_CONSOLE_LISTEN"))
						})
				}) {
					t.Errorf("Ingress host %s path %s: backend %+v is not the console's port %s", r.Host, p.Path, b, s.defaultPort("INGESTQ_CONSOLE_LISTEN"))
				}
			}
		}
	})
}

// envOf returns a container's variables (valueFrom ones as "").
func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// stageDeployment finds the Deployment that runs a stage: named after it,
// with one container running the stage's image, selecting its own pods
// and no other Deployment's.
func stageDeployment(m *manifests, s *service) (*appsv1.Deployment, corev1.Container, error) {
	i := slices.IndexFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == s.name })
	if i < 0 {
		return nil, corev1.Container{}, fmt.Errorf("no Deployment %s", s.name)
	}
	d := m.deployments[i]
	if cs := d.Spec.Template.Spec.Containers; len(cs) != 1 || cs[0].Image != "ingestq/"+s.name+":latest" {
		return nil, corev1.Container{}, fmt.Errorf("Deployment %s: want one container, running ingestq/%s:latest", d.Name, s.name)
	}
	for _, other := range m.deployments {
		if d.Spec.Selector == nil || selects(d.Spec.Selector.MatchLabels, other.Spec.Template.Labels) != (other == d) {
			return nil, corev1.Container{}, fmt.Errorf("Deployment %s: its selector does not select its own pods alone", d.Name)
		}
	}
	return d, d.Spec.Template.Spec.Containers[0], nil
}

// otelCheck checks that the stage's spans carry its name and its pod's
// name and namespace (from the downward API), and that the OTLP endpoint
// is there to be set.
func otelCheck(s *service, d *appsv1.Deployment, c corev1.Container) error {
	index := func(name string) int {
		return slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	}
	// field returns what the downward API gives a variable, if it does.
	field := func(i int) string {
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil {
			return ""
		}
		return c.Env[i].ValueFrom.FieldRef.FieldPath
	}
	var errs []error
	if index("OTEL_EXPORTER_OTLP_ENDPOINT") < 0 {
		errs = append(errs, errors.New("no OTEL_EXPORTER_OTLP_ENDPOINT to set"))
	}
	name := envOf(c)["OTEL_SERVICE_NAME"]
	if label, ok := strings.CutPrefix(field(index("OTEL_SERVICE_NAME")), "metadata.labels['"); ok {
		name = d.Spec.Template.Labels[strings.TrimSuffix(label, "']")]
	}
	if name != s.name {
		errs = append(errs, fmt.Errorf("OTEL_SERVICE_NAME gives %q", name))
	}
	attrs := index("OTEL_RESOURCE_ATTRIBUTES")
	for attr, fieldPath := range map[string]string{"k8s.pod.name": "metadata.name", "k8s.namespace.name": "metadata.namespace"} {
		ok := false
		for _, ref := range reference.FindAllStringSubmatch(envOf(c)["OTEL_RESOURCE_ATTRIBUTES"], -1) {
			// A reference resolves only to a variable defined before it.
			if i := index(ref[1]); strings.Contains(envOf(c)["OTEL_RESOURCE_ATTRIBUTES"], attr+"="+ref[0]) && i < attrs && field(i) == fieldPath {
				ok = true
			}
		}
		if !ok {
			errs = append(errs, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES does not set %s to the pod's %s (the downward API, defined before it)", attr, fieldPath))
		}
	}
	return errors.Join(errs...)
}

// volumesCheck checks that every volume a pod mounts is declared (or
// claimed per pod) and every claim, ConfigMap and Secret it names exists.
func volumesCheck(m *manifests, pod corev1.PodSpec, claimed []string) error {
	var errs []error
	declared := slices.Clone(claimed)
	for _, v := range pod.Volumes {
		declared = append(declared, v.Name)
		switch {
		case v.PersistentVolumeClaim != nil && !slices.ContainsFunc(m.claims, func(c *corev1.PersistentVolumeClaim) bool { return c.Name == v.PersistentVolumeClaim.ClaimName }):
			errs = append(errs, fmt.Errorf("volume %s: no PersistentVolumeClaim %s", v.Name, v.PersistentVolumeClaim.ClaimName))
		case v.ConfigMap != nil && !slices.ContainsFunc(m.configMaps, func(c *corev1.ConfigMap) bool { return c.Name == v.ConfigMap.Name }):
			errs = append(errs, fmt.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name))
		case v.Secret != nil && !operatorSecret(v.Secret.SecretName):
			errs = append(errs, fmt.Errorf("volume %s: Secret %s is neither in the manifests nor one the operator creates", v.Name, v.Secret.SecretName))
		}
	}
	for _, c := range pod.Containers {
		for _, vm := range c.VolumeMounts {
			if !slices.Contains(declared, vm.Name) {
				errs = append(errs, fmt.Errorf("container %s mounts %s, which is not a volume of the pod", c.Name, vm.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// restrictedCheck checks what the namespace's "restricted" Pod Security
// Standard demands (non-root, no privilege escalation, all capabilities
// dropped, the runtime's seccomp profile), no service account token, and a
// read-only root file system when readOnlyRoot.
func restrictedCheck(pod corev1.PodSpec, c corev1.Container, readOnlyRoot bool) error {
	psc := cmp.Or(pod.SecurityContext, &corev1.PodSecurityContext{})
	csc := cmp.Or(c.SecurityContext, &corev1.SecurityContext{})
	var errs []error
	if nonRoot := cmp.Or(csc.RunAsNonRoot, psc.RunAsNonRoot); nonRoot == nil || !*nonRoot {
		errs = append(errs, errors.New("runAsNonRoot is not true"))
	}
	if uid := cmp.Or(csc.RunAsUser, psc.RunAsUser); uid != nil && *uid == 0 {
		errs = append(errs, errors.New("runAsUser 0"))
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		errs = append(errs, errors.New("allowPrivilegeEscalation is not false"))
	}
	if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
		errs = append(errs, fmt.Errorf("capabilities %+v, want drop [ALL] and nothing added", csc.Capabilities))
	}
	if seccomp := cmp.Or(csc.SeccompProfile, psc.SeccompProfile); seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errs = append(errs, fmt.Errorf("seccompProfile %+v, want RuntimeDefault", seccomp))
	}
	if readOnlyRoot && (csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem) {
		errs = append(errs, errors.New("readOnlyRootFilesystem is not true"))
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		errs = append(errs, errors.New("the pod mounts a service account token it has no use for"))
	}
	return errors.Join(errs...)
}

// checkZooKeeper checks the ZooKeeper reference and returns its client
// Service.
func checkZooKeeper(t *testing.T, m *manifests) *corev1.Service {
	var client *corev1.Service
	t.Run("ZooKeeper is a three-node StatefulSet with headless and client Services, a disruption budget and persistent data", func(t *testing.T) {
		i := slices.IndexFunc(m.statefulSets, func(s *appsv1.StatefulSet) bool {
			return strings.HasPrefix(s.Spec.Template.Spec.Containers[0].Image, "zookeeper:")
		})
		if i < 0 {
			t.Fatal("no StatefulSet runs a zookeeper image")
		}
		zk := m.statefulSets[i]
		pods, c := zk.Spec.Template.Labels, zk.Spec.Template.Spec.Containers[0]
		if zk.Spec.Replicas == nil || *zk.Spec.Replicas != 3 || zk.Spec.Selector == nil || !selects(zk.Spec.Selector.MatchLabels, pods) {
			t.Errorf("StatefulSet %s: want 3 replicas and a selector of its own pods", zk.Name)
		}
		for _, svc := range m.services {
			switch {
			case !selects(svc.Spec.Selector, pods):
			case svc.Name == zk.Spec.ServiceName:
				if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
					t.Errorf("Service %s: want headless, publishing not-ready addresses (servers find each other before a quorum)", svc.Name)
				}
			case slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 2181 }):
				client = svc
			}
		}
		if client == nil {
			t.Error("no client Service selects the ZooKeeper pods on port 2181")
		}
		if !slices.ContainsFunc(m.budgets, func(pdb *policyv1.PodDisruptionBudget) bool {
			return pdb.Spec.Selector != nil && selects(pdb.Spec.Selector.MatchLabels, pods) && pdb.Spec.MaxUnavailable != nil && pdb.Spec.MaxUnavailable.IntValue() == 1
		}) {
			t.Error("no PodDisruptionBudget keeps two of the three servers (maxUnavailable 1)")
		}
		var members []string
		for i := range 3 {
			members = append(members, fmt.Sprintf("server.%d=%s-%d.%s:2888:3888;2181", i+1, zk.Name, i, zk.Spec.ServiceName))
		}
		if got := envOf(c)["ZOO_SERVERS"]; got != strings.Join(members, " ") {
			t.Errorf("ZOO_SERVERS %q, want %q (server.N is pod N-1 under the headless Service)", got, strings.Join(members, " "))
		}
		// The data and the transaction log (the image's default /datalog
		// unless ZOO_DATA_LOG_DIR) must survive the pod.
		for _, dir := range []string{"/data", cmp.Or(envOf(c)["ZOO_DATA_LOG_DIR"], "/datalog")} {
			if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
				return (dir == vm.MountPath || strings.HasPrefix(dir, vm.MountPath+"/")) &&
					slices.ContainsFunc(zk.Spec.VolumeClaimTemplates, func(ct corev1.PersistentVolumeClaim) bool { return ct.Name == vm.Name })
			}) {
				t.Errorf("ZooKeeper's %s is on no claimed volume", dir)
			}
		}
		if err := restrictedCheck(zk.Spec.Template.Spec, c, false); err != nil {
			t.Errorf("StatefulSet %s: %v", zk.Name, err)
		}
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("StatefulSet %s: want readiness and liveness probes", zk.Name)
		}
	})
	return client
}
