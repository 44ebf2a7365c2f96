package deploy

import (
	"fmt"

	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ingestq/ingestq/e2e/names"
	"github.com/ingestq/ingestq/e2e/stack"
)

// scaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) the
// manifests use; decoding refuses any other field.
type scaledObject struct {
	APIVersion        string `json:"apiVersion"`
	Kind              string `json:"kind"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int32 `json:"minReplicaCount"`
		MaxReplicaCount *int32 `json:"maxReplicaCount"`
		Advanced        struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced"`
		Triggers []struct {
			Type       string            `json:"type"`
			Name       string            `json:"name"`
			MetricType string            `json:"metricType"`
			Metadata   map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// stageStates are the states each stage's replicas take jobs from, as the
// queue's figures name them (ingestq_queue_*{state}).
var stageStates = map[string][]string{
	"estimator":   {"pending", "estimating"},
	"provisioner": {"provisioning"},
	"downloader":  {"downloading"},
	"processor":   {"processing", "storing"},
	"recorder":    {"recording"},
	"notifier":    {"notify"},
}

// stateSelector finds the states a query selects: state="x" or state=~"x|y".
var stateSelector = regexp.MustCompile(`state=~?"([a-z|]+)"`)

func checkAutoscaling(t *testing.T, repo string, services []*service) {
	m := render(t, repo, "deploy/k8s-autoscaling")
	base := render(t, repo, "deploy/k8s")
	metrics, err := names.Metrics(repo)
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mt := range metrics {
		exported[mt.Name] = true
	}
	if len(m.scaled) == 0 {
		t.Fatal("no ScaledObject")
	}
	if len(m.deployments) != len(base.deployments) || len(m.namespaces) != 1 {
		t.Errorf("%d Deployments (deploy/k8s: %d), %d Namespaces: want deploy/k8s and the ScaledObjects", len(m.deployments), len(base.deployments), len(m.namespaces))
	}
	scaledTargets := map[string]bool{}
	var queries []string
	for _, so := range m.scaled {
		t.Run(so.Name, func(t *testing.T) {
			if so.Namespace != m.namespaces[0].Name {
				t.Errorf("in namespace %q", so.Namespace)
			}
			target := so.Spec.ScaleTargetRef.Name
			if scaledTargets[target] {
				t.Errorf("a second ScaledObject of %s", target)
			}
			scaledTargets[target] = true
			i := slices.IndexFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == target })
			if i < 0 {
				t.Fatalf("scales %s, which is no Deployment", target)
			}
			d := m.deployments[i]
			if d.Spec.Replicas != nil {
				t.Errorf("Deployment %s keeps replicas: %d, which every apply would set back over the autoscaler", target, *d.Spec.Replicas)
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if pvc := v.PersistentVolumeClaim; pvc != nil {
					for _, c := range m.claims {
						if c.Name == pvc.ClaimName && slices.Contains(c.Spec.AccessModes, corev1.ReadWriteOnce) {
							t.Errorf("Deployment %s mounts the ReadWriteOnce claim %s: its replicas cannot be scaled", target, c.Name)
						}
					}
				}
			}
			lo, hi := so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount
			if lo == nil || hi == nil || *lo < 1 || *hi < *lo {
				t.Errorf("replicas %v..%v: want at least one, a maximum above the minimum", lo, hi)
			}
			if b := so.Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior; b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil {
				t.Error("no scale-down stabilization window: a replica drained on every dip")
			}
			s := services[slices.IndexFunc(services, func(s *service) bool { return s.name == target })]
			env := s.effective(envOf(d.Spec.Template.Spec.Containers[0]))
			want := stageStates[target]
			if want == nil {
				t.Fatalf("%s takes no job state", target)
			}
			var depth, age bool
			for _, tr := range so.Spec.Triggers {
				q := tr.Metadata["query"]
				queries = append(queries, q)
				if tr.Type != "prometheus" || tr.Metadata["serverAddress"] == "" || q == "" {
					t.Errorf("trigger %q: type %q, serverAddress %q, query %q: want a prometheus query", tr.Name, tr.Type, tr.Metadata["serverAddress"], q)
				}
				sel := stateSelector.FindStringSubmatch(q)
				if sel == nil || !slices.Equal(slices.Sorted(slices.Values(strings.Split(sel[1], "|"))), slices.Sorted(slices.Values(want))) {
					t.Errorf("trigger %q selects %v, want the states %s takes: %v", tr.Name, sel, target, want)
				}
				for _, name := range metricName.FindAllString(q, -1) {
					if !exported[name] {
						t.Errorf("trigger %q uses %s, which no ingestq process exports", tr.Name, name)
					}
				}
				switch {
				case strings.Contains(q, "ingestq_queue_jobs"):
					depth = true
					if tr.MetricType != "AverageValue" || tr.Metadata["threshold"] != env["INGESTQ_CONCURRENCY"] {
						t.Errorf("depth trigger: %s threshold %q, want AverageValue of the jobs a replica takes at once, INGESTQ_CONCURRENCY=%s",
							tr.MetricType, tr.Metadata["threshold"], env["INGESTQ_CONCURRENCY"])
					}
				case strings.Contains(q, "ingestq_queue_oldest_job_age_seconds"):
					age = true
					if sec, err := strconv.Atoi(tr.Metadata["threshold"]); err != nil || sec <= 0 || tr.MetricType != "Value" {
						t.Errorf("age trigger: %s threshold %q, want a Value in seconds", tr.MetricType, tr.Metadata["threshold"])
					}
				}
			}
			if !depth || !age {
				t.Errorf("depth trigger %v, age trigger %v: want both", depth, age)
			}
		})
	}
	for _, d := range m.deployments {
		if !scaledTargets[d.Name] && d.Spec.Replicas == nil {
			t.Errorf("Deployment %s is not scaled and has no replicas", d.Name)
		}
	}
	t.Run("every query is PromQL promtool accepts", func(t *testing.T) {
		checkPromQL(t, queries)
	})
}

// checkPromQL has promtool check the queries, as recording rules.
func checkPromQL(t *testing.T, queries []string) {
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range queries {
		rules = append(rules, rule{Record: fmt.Sprintf("query_%d", i), Expr: q})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "scaledobjects", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), promtool(t), "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the ScaledObjects' queries: %v\n%s", err, out)
	}
}

// sizingConcurrency finds the concurrency docs/sizing.md says the
// deployment files run.
var sizingConcurrency = regexp.MustCompile("the\\s+deployment\\s+files\\s+run\\s+`INGESTQ_CONCURRENCY=(\\d+)`")

// checkConcurrency: every stage (not the console) of docker-compose.yml and deploy/k8s runs
// the INGESTQ_CONCURRENCY docs/sizing.md gives.
func checkConcurrency(t *testing.T, repo string, cf *composeFile, services []*service) {
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "sizing.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := sizingConcurrency.FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/sizing.md does not say which INGESTQ_CONCURRENCY the deployment files run")
	}
	want := string(m[1])
	k8s := render(t, repo, "deploy/k8s")
	for _, s := range services {
		if !slices.Contains(stack.Services, s.name) {
			continue // the console takes no jobs
		}
		if got := s.effective(cf.Services[s.name].Environment)["INGESTQ_CONCURRENCY"]; got != want {
			t.Errorf("docker-compose.yml: %s runs INGESTQ_CONCURRENCY=%s, docs/sizing.md says %s", s.name, got, want)
		}
		d, c, err := stageDeployment(k8s, s)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.effective(envOf(c))["INGESTQ_CONCURRENCY"]; got != want {
			t.Errorf("deploy/k8s: %s runs INGESTQ_CONCURRENCY=%s, docs/sizing.md says %s", d.Name, got, want)
		}
	}
}
