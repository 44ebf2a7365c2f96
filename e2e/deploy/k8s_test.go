package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// operatorSecret reports whether the manifests may use the Secret name
// without holding it: the operator creates it (docs/deploy.md says how).
func operatorSecret(name string) bool { return name == "ingestq-admin-token" }

// kustomization is the part of kustomize's Kustomization deploy/k8s uses.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// manifests are the objects of deploy/k8s, by kind.
type manifests struct {
	files         []string // manifest files, kustomization.yaml aside
	kustomization *kustomization
	namespaces    []*corev1.Namespace
	configMaps    []*corev1.ConfigMap
	claims        []*corev1.PersistentVolumeClaim
	services      []*corev1.Service
	deployments   []*appsv1.Deployment
	statefulSets  []*appsv1.StatefulSet
	budgets       []*policyv1.PodDisruptionBudget
}

// readManifests decodes every YAML document of dir into its API type,
// refusing unknown kinds and unknown fields (what a cluster would reject,
// and misspellings it would silently drop in lenient clients).
func readManifests(dir string) (*manifests, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m := &manifests{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
			continue
		}
		if name != "kustomization.yaml" {
			m.files = append(m.files, name)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 1; ; i++ {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s, document %d: %w", name, i, err)
			}
			if doc == nil {
				continue
			}
			if err := m.add(doc); err != nil {
				return nil, fmt.Errorf("%s, document %d: %w", name, i, err)
			}
		}
	}
	return m, nil
}

func (m *manifests) add(doc map[string]any) error {
	kind := fmt.Sprintf("%v/%v", doc["apiVersion"], doc["kind"])
	switch kind {
	case "v1/Namespace":
		return decodeInto(doc, &m.namespaces)
	case "v1/ConfigMap":
		return decodeInto(doc, &m.configMaps)
	case "v1/PersistentVolumeClaim":
		return decodeInto(doc, &m.claims)
	case "v1/Service":
		return decodeInto(doc, &m.services)
	case "apps/v1/Deployment":
		return decodeInto(doc, &m.deployments)
	case "apps/v1/StatefulSet":
		return decodeInto(doc, &m.statefulSets)
	case "policy/v1/PodDisruptionBudget":
		return decodeInto(doc, &m.budgets)
	case "kustomize.config.k8s.io/v1beta1/Kustomization":
		if m.kustomization != nil {
			return errors.New("a second Kustomization")
		}
		var ks []*kustomization
		if err := decodeInto(doc, &ks); err != nil {
			return err
		}
		m.kustomization = ks[0]
		return nil
	}
	return fmt.Errorf("kind %s is not one this test knows", kind)
}

// decodeInto decodes doc strictly into a new T and appends it to list.
func decodeInto[T any](doc map[string]any, list *[]*T) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	obj := new(T)
	if err := dec.Decode(obj); err != nil {
		return fmt.Errorf("%v %v: %w", doc["kind"], doc["metadata"], err)
	}
	*list = append(*list, obj)
	return nil
}

// selects reports whether a label selector made of matchLabels only
// selects pods labelled labels.
func selects(selector map[string]string, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// envOf returns a container's variables (valueFrom ones as "").
func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
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

func checkKubernetes(t *testing.T, repo string, services []*service) {
	dir := filepath.Join(repo, "deploy", "k8s")
	m, err := readManifests(dir)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("kustomization lists every manifest file", func(t *testing.T) {
		if m.kustomization == nil {
			t.Fatal("no kustomization.yaml")
		}
		listed := slices.Sorted(slices.Values(m.kustomization.Resources))
		if !slices.Equal(listed, m.files) {
			t.Errorf("kustomization resources %v, want the manifest files %v", listed, m.files)
		}
	})

	t.Run("every object is in the one declared namespace", func(t *testing.T) {
		if len(m.namespaces) != 1 {
			t.Fatalf("%d Namespaces, want 1", len(m.namespaces))
		}
		ns := m.namespaces[0].Name
		var metas []string
		for _, o := range m.configMaps {
			metas = appendOutside(metas, ns, "ConfigMap", o.Name, o.Namespace)
		}
		for _, o := range m.claims {
			metas = appendOutside(metas, ns, "PersistentVolumeClaim", o.Name, o.Namespace)
		}
		for _, o := range m.services {
			metas = appendOutside(metas, ns, "Service", o.Name, o.Namespace)
		}
		for _, o := range m.deployments {
			metas = appendOutside(metas, ns, "Deployment", o.Name, o.Namespace)
		}
		for _, o := range m.statefulSets {
			metas = appendOutside(metas, ns, "StatefulSet", o.Name, o.Namespace)
		}
		for _, o := range m.budgets {
			metas = appendOutside(metas, ns, "PodDisruptionBudget", o.Name, o.Namespace)
		}
		for _, s := range metas {
			t.Error(s)
		}
	})

	t.Run("the profiles ConfigMap holds the files of examples/profiles as they are", func(t *testing.T) {
		cm := findConfigMap(m, "ingestq-profiles")
		if cm == nil {
			t.Fatal("no ConfigMap ingestq-profiles")
		}
		examples := filepath.Join(repo, "examples", "profiles")
		files, err := filepath.Glob(filepath.Join(examples, "*.y*ml"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range files {
			names = append(names, filepath.Base(f))
			want, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := cm.Data[filepath.Base(f)]; !ok || got != string(want) {
				t.Errorf("ConfigMap key %s differs from %s:\n%s", filepath.Base(f), f, got)
			}
		}
		if keys := slices.Sorted(maps.Keys(cm.Data)); !slices.Equal(keys, names) {
			t.Errorf("ConfigMap keys %v, want the example profiles %v", keys, names)
		}
	})

	t.Run("every volume a pod mounts is declared and every claim, ConfigMap and Secret it names exists", func(t *testing.T) {
		for _, pod := range podTemplates(m) {
			if err := volumesCheck(m, pod); err != nil {
				t.Errorf("%s: %v", pod.owner, err)
			}
		}
	})

	zkClient := checkZooKeeper(t, m)

	checks := []struct {
		name  string
		check func(s *service, d *appsv1.Deployment, c corev1.Container) error
	}{
		{"gRPC startup, readiness and liveness probes ask the port the service listens on", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			env := envOf(c)
			listen := env["INGESTQ_LISTEN"]
			if err := listenCheck("INGESTQ_LISTEN", listen, s.grpcPort); err != nil {
				return err
			}
			port, _ := strconv.Atoi(s.grpcPort)
			if _, ok := containerPort(c, intstr.FromInt32(int32(port))); !ok {
				return fmt.Errorf("the container does not declare port %d (INGESTQ_LISTEN)", port)
			}
			var errs []error
			probes := []struct {
				name  string
				probe *corev1.Probe
			}{{"startupProbe", c.StartupProbe}, {"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}}
			for _, pr := range probes {
				name, p := pr.name, pr.probe
				switch {
				case p == nil:
					errs = append(errs, fmt.Errorf("no %s", name))
				case p.GRPC == nil:
					errs = append(errs, fmt.Errorf("%s is not a gRPC probe", name))
				case p.GRPC.Port != int32(port):
					errs = append(errs, fmt.Errorf("%s asks port %d, the service listens on %d", name, p.GRPC.Port, port))
				}
			}
			return errors.Join(errs...)
		}},
		{"sets only variables the binary reads", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			return envCheck(s, envOf(c))
		}},
		{"connects to ZooKeeper through its client Service", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			if zkClient == nil {
				return errors.New("no ZooKeeper client Service")
			}
			got := envOf(c)["INGESTQ_ZK_SERVERS"]
			host, port, err := net.SplitHostPort(got)
			ns := zkClient.Namespace
			if err != nil || port != "2181" || !slices.Contains([]string{zkClient.Name, zkClient.Name + "." + ns, zkClient.Name + "." + ns + ".svc"}, host) {
				return fmt.Errorf("INGESTQ_ZK_SERVERS %q, want %s:2181 (the Service %s keeps its address when ZooKeeper pods move)", got, zkClient.Name, zkClient.Name)
			}
			return nil
		}},
		{"outlasts a drain: the grace period before SIGKILL and the liveness failure window", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			drain, err := drainTimeout(s, envOf(c))
			if err != nil {
				return err
			}
			var errs []error
			grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
			if grace == nil || time.Duration(*grace)*time.Second <= drain+stopGrace {
				errs = append(errs, fmt.Errorf("terminationGracePeriodSeconds %v, want more than the drain timeout %s plus %s", grace, drain, stopGrace))
			}
			// Health turns NOT_SERVING while draining: liveness must not
			// kill a pod that drains.
			if p := c.LivenessProbe; p != nil {
				period, failures := p.PeriodSeconds, p.FailureThreshold
				if period == 0 {
					period = 10 // the API's defaults
				}
				if failures == 0 {
					failures = 3
				}
				window := time.Duration(period*failures) * time.Second
				if window <= drain {
					errs = append(errs, fmt.Errorf("liveness gives up after %s, within the drain timeout %s", window, drain))
				}
			}
			return errors.Join(errs...)
		}},
		{"requests and limits CPU and memory", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			var errs []error
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, hasReq := c.Resources.Requests[res]
				lim, hasLim := c.Resources.Limits[res]
				switch {
				case !hasReq || !hasLim:
					errs = append(errs, fmt.Errorf("%s: request %v, limit %v; want both", res, hasReq, hasLim))
				case req.Cmp(lim) > 0:
					errs = append(errs, fmt.Errorf("%s: request %s above the limit %s", res, req.String(), lim.String()))
				}
			}
			return errors.Join(errs...)
		}},
		{"runs non-root without privileges on a read-only root file system", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			return restrictedCheck(d.Spec.Template.Spec, c, true)
		}},
		{"Prometheus scrapes the metrics port the service listens on", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			ann := d.Spec.Template.Annotations
			var errs []error
			if err := listenCheck("INGESTQ_METRICS_LISTEN", envOf(c)["INGESTQ_METRICS_LISTEN"], s.metricsPort); err != nil {
				errs = append(errs, err)
			}
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != s.metricsPort || ann["prometheus.io/path"] != "/metrics" {
				errs = append(errs, fmt.Errorf("pod annotations %v, want prometheus.io/scrape true, port %s, path /metrics", ann, s.metricsPort))
			}
			port, _ := strconv.Atoi(s.metricsPort)
			if _, ok := containerPort(c, intstr.FromInt32(int32(port))); !ok {
				errs = append(errs, fmt.Errorf("the container does not declare the metrics port %d", port))
			}
			return errors.Join(errs...)
		}},
		{"a Service selects the pods and routes the gRPC port to them", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			port, _ := strconv.Atoi(s.grpcPort)
			for _, svc := range m.services {
				if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
					continue
				}
				for _, sp := range svc.Spec.Ports {
					target := sp.TargetPort
					if target.Type == intstr.Int && target.IntVal == 0 {
						target = intstr.FromInt32(sp.Port)
					}
					if cp, ok := containerPort(c, target); ok && cp == int32(port) {
						return nil
					}
				}
			}
			return fmt.Errorf("no Service selects labels %v and targets port %d", d.Spec.Template.Labels, port)
		}},
		{"keeps every path it is given on a volume", func(s *service, d *appsv1.Deployment, c corev1.Container) error {
			var mounts []string
			for _, vm := range c.VolumeMounts {
				mounts = append(mounts, path.Clean(vm.MountPath))
			}
			return mountedCheck(envOf(c), mounts)
		}},
	}
	for _, ch := range checks {
		t.Run(ch.name, func(t *testing.T) {
			for _, s := range services {
				d, c, err := stageDeployment(m, s)
				if err != nil {
					t.Errorf("%s: %v", s.name, err)
					continue
				}
				if err := ch.check(s, d, c); err != nil {
					t.Errorf("%s: %v", s.name, err)
				}
			}
		})
	}
}

func appendOutside(out []string, ns, kind, name, namespace string) []string {
	if namespace != ns {
		out = append(out, fmt.Sprintf("%s %s is in namespace %q, want %q", kind, name, namespace, ns))
	}
	return out
}

func findConfigMap(m *manifests, name string) *corev1.ConfigMap {
	for _, cm := range m.configMaps {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

// stageDeployment finds the Deployment that runs a stage: named after it,
// with one container running the stage's image.
func stageDeployment(m *manifests, s *service) (*appsv1.Deployment, corev1.Container, error) {
	for _, d := range m.deployments {
		if d.Name != s.name {
			continue
		}
		cs := d.Spec.Template.Spec.Containers
		if len(cs) != 1 {
			return nil, corev1.Container{}, fmt.Errorf("Deployment %s has %d containers, want 1", d.Name, len(cs))
		}
		if want := "ingestq/" + s.name + ":latest"; cs[0].Image != want {
			return nil, corev1.Container{}, fmt.Errorf("Deployment %s runs image %s, want %s", d.Name, cs[0].Image, want)
		}
		if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) || len(d.Spec.Selector.MatchExpressions) > 0 {
			return nil, corev1.Container{}, fmt.Errorf("Deployment %s: its selector does not select its own pods", d.Name)
		}
		return d, cs[0], nil
	}
	return nil, corev1.Container{}, fmt.Errorf("no Deployment %s", s.name)
}

// podTemplate is the pod spec of a workload.
type podTemplate struct {
	owner string
	spec  corev1.PodSpec
	// claimTemplates name the volumes a StatefulSet claims for each pod.
	claimTemplates []string
}

func podTemplates(m *manifests) []podTemplate {
	var out []podTemplate
	for _, d := range m.deployments {
		out = append(out, podTemplate{owner: "Deployment " + d.Name, spec: d.Spec.Template.Spec})
	}
	for _, s := range m.statefulSets {
		pt := podTemplate{owner: "StatefulSet " + s.Name, spec: s.Spec.Template.Spec}
		for _, ct := range s.Spec.VolumeClaimTemplates {
			pt.claimTemplates = append(pt.claimTemplates, ct.Name)
		}
		out = append(out, pt)
	}
	return out
}

func volumesCheck(m *manifests, pod podTemplate) error {
	var errs []error
	declared := map[string]bool{}
	for _, name := range pod.claimTemplates {
		declared[name] = true
	}
	for _, v := range pod.spec.Volumes {
		declared[v.Name] = true
		switch {
		case v.PersistentVolumeClaim != nil:
			if !slices.ContainsFunc(m.claims, func(c *corev1.PersistentVolumeClaim) bool { return c.Name == v.PersistentVolumeClaim.ClaimName }) {
				errs = append(errs, fmt.Errorf("volume %s: no PersistentVolumeClaim %s", v.Name, v.PersistentVolumeClaim.ClaimName))
			}
		case v.ConfigMap != nil:
			if findConfigMap(m, v.ConfigMap.Name) == nil {
				errs = append(errs, fmt.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name))
			}
		case v.Secret != nil:
			if !operatorSecret(v.Secret.SecretName) {
				errs = append(errs, fmt.Errorf("volume %s: Secret %s is neither in the manifests nor one the operator creates", v.Name, v.Secret.SecretName))
			}
		}
	}
	for _, c := range pod.spec.Containers {
		for _, vm := range c.VolumeMounts {
			if !declared[vm.Name] {
				errs = append(errs, fmt.Errorf("container %s mounts %s, which is not a volume of the pod", c.Name, vm.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// restrictedCheck checks what the namespace's "restricted" Pod Security
// Standard demands (non-root, no privilege escalation, all capabilities
// dropped, the runtime's seccomp profile), and a read-only root file
// system when readOnlyRoot.
func restrictedCheck(pod corev1.PodSpec, c corev1.Container, readOnlyRoot bool) error {
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	var errs []error
	nonRoot := csc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		errs = append(errs, errors.New("runAsNonRoot is not true"))
	}
	for _, uid := range []*int64{psc.RunAsUser, csc.RunAsUser} {
		if uid != nil && *uid == 0 {
			errs = append(errs, errors.New("runAsUser 0"))
		}
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		errs = append(errs, errors.New("allowPrivilegeEscalation is not false"))
	}
	if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
		errs = append(errs, fmt.Errorf("capabilities %+v, want drop [ALL] and nothing added", csc.Capabilities))
	}
	seccomp := csc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
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
	var zk *appsv1.StatefulSet
	for _, s := range m.statefulSets {
		for _, c := range s.Spec.Template.Spec.Containers {
			if strings.HasPrefix(c.Image, "zookeeper:") {
				zk = s
			}
		}
	}
	var client *corev1.Service
	t.Run("ZooKeeper is a three-node StatefulSet with headless and client Services and a disruption budget", func(t *testing.T) {
		if zk == nil {
			t.Fatal("no StatefulSet runs a zookeeper image")
		}
		if zk.Spec.Replicas == nil || *zk.Spec.Replicas != 3 {
			t.Errorf("StatefulSet %s: replicas %v, want 3", zk.Name, zk.Spec.Replicas)
		}
		if zk.Spec.Selector == nil || !selects(zk.Spec.Selector.MatchLabels, zk.Spec.Template.Labels) {
			t.Errorf("StatefulSet %s: its selector does not select its own pods", zk.Name)
		}
		pods := zk.Spec.Template.Labels
		var headless *corev1.Service
		for _, svc := range m.services {
			if !selects(svc.Spec.Selector, pods) {
				continue
			}
			switch {
			case svc.Name == zk.Spec.ServiceName:
				headless = svc
			case svc.Spec.ClusterIP != corev1.ClusterIPNone && slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 2181 }):
				client = svc
			}
		}
		if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
			t.Errorf("serviceName %s: want a headless Service selecting the pods that publishes not-ready addresses (servers find each other before a quorum)", zk.Spec.ServiceName)
		}
		if client == nil {
			t.Error("no client Service selects the ZooKeeper pods on port 2181")
		}
		budget := false
		for _, pdb := range m.budgets {
			if pdb.Spec.Selector != nil && selects(pdb.Spec.Selector.MatchLabels, pods) &&
				(pdb.Spec.MaxUnavailable != nil && pdb.Spec.MaxUnavailable.IntValue() == 1 ||
					pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() == 2) {
				budget = true
			}
		}
		if !budget {
			t.Error("no PodDisruptionBudget keeps two of the three servers (maxUnavailable 1 or minAvailable 2)")
		}

		c := zk.Spec.Template.Spec.Containers[0]
		env := envOf(c)
		var members []string
		for i := range 3 {
			members = append(members, fmt.Sprintf("server.%d=%s-%d.%s:2888:3888;2181", i+1, zk.Name, i, zk.Spec.ServiceName))
		}
		if want := strings.Join(members, " "); env["ZOO_SERVERS"] != want {
			t.Errorf("ZOO_SERVERS %q, want %q (server.N is pod N-1 under the headless Service)", env["ZOO_SERVERS"], want)
		}
		// ZooKeeper's data and transaction log must survive the pod.
		var claimed []string
		for _, ct := range zk.Spec.VolumeClaimTemplates {
			for _, vm := range c.VolumeMounts {
				if vm.Name == ct.Name {
					claimed = append(claimed, path.Clean(vm.MountPath))
				}
			}
		}
		if err := persistedCheck(map[string]string{"dataDir": "/data", "dataLogDir": env["ZOO_DATA_LOG_DIR"]}, claimed); err != nil {
			t.Error(err)
		}
		if err := restrictedCheck(zk.Spec.Template.Spec, c, false); err != nil {
			t.Errorf("StatefulSet %s: %v", zk.Name, err)
		}
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("StatefulSet %s: readiness %v, liveness %v; want both", zk.Name, c.ReadinessProbe != nil, c.LivenessProbe != nil)
		}
	})
	return client
}

// persistedCheck checks that each ZooKeeper directory lies on a claimed
// volume; the image puts the log in /datalog when ZOO_DATA_LOG_DIR is unset.
func persistedCheck(dirs map[string]string, claimed []string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(dirs)) {
		dir := dirs[name]
		if dir == "" {
			dir = "/datalog"
		}
		dir = path.Clean(dir)
		if !slices.ContainsFunc(claimed, func(m string) bool { return dir == m || strings.HasPrefix(dir, m+"/") }) {
			errs = append(errs, fmt.Errorf("ZooKeeper's %s %s is on no claimed volume (%v)", name, dir, claimed))
		}
	}
	return errors.Join(errs...)
}
