// Package kubernetes holds the manifests that run a Weir job on
// Kubernetes with standby coordinators (README, "Standby coordinators");
// its test keeps them from rotting.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// objects decodes every manifest strictly (unknown or misspelt fields
// refused) into the Kubernetes API's types, by kind.
func objects(t *testing.T) map[string]any {
	t.Helper()
	paths, err := filepath.Glob("*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	objs := map[string]any{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s, document %d: %v", p, i+1, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "apps/v1 StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "policy/v1 PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			default:
				t.Fatalf("%s, document %d: kind %q of %q: add it to this test", p, i+1, tm.Kind, tm.APIVersion)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s, document %d (%s): %v", p, i+1, tm.Kind, err)
			}
			name := obj.(metav1.Object).GetName()
			if ns := obj.(metav1.Object).GetNamespace(); tm.Kind != "Namespace" && ns != "weir" {
				t.Errorf("%s %s is in namespace %q, not weir", tm.Kind, name, ns)
			}
			key := tm.Kind + "/" + name
			if objs[key] != nil {
				t.Fatalf("%s twice", key)
			}
			objs[key] = obj
		}
	}
	return objs
}

func flag(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestManifests decodes the manifests strictly and checks that they fit
// together: the coordinators run with --ha at the etcd Service, two of
// them, ready only while leading; the workers are a StatefulSet named by
// their pods and join the coordinator Service; the job's flags agree; the
// Secrets and Services they name exist.
func TestManifests(t *testing.T) {
	objs := objects(t)
	get := func(key string) any {
		t.Helper()
		o := objs[key]
		if o == nil {
			t.Fatalf("no %s in the manifests", key)
		}
		return o
	}
	coord := get("Deployment/weir-coordinator").(*appsv1.Deployment)
	worker := get("StatefulSet/weir-worker").(*appsv1.StatefulSet)
	get("Namespace/weir")
	get("Secret/weir-s3")
	get("PodDisruptionBudget/weir-coordinator")

	if coord.Spec.Replicas == nil || *coord.Spec.Replicas < 2 {
		t.Errorf("coordinators: %v replicas, want at least 2 (one stands by)", coord.Spec.Replicas)
	}
	cc := coord.Spec.Template.Spec.Containers[0]
	wc := worker.Spec.Template.Spec.Containers[0]
	if cc.Args[0] != "coordinator" || wc.Args[0] != "worker" || cc.Args[1] != wc.Args[1] {
		t.Errorf("roles and jobs: %v, %v", cc.Args[:2], wc.Args[:2])
	}
	for _, f := range []string{"input", "output", "checkpoint-dir", "parallelism", "certs"} {
		if flag(cc.Args, f) == "" || flag(cc.Args, f) != flag(wc.Args, f) {
			t.Errorf("--%s: coordinator %q, worker %q: a cluster's processes build the same job", f, flag(cc.Args, f), flag(wc.Args, f))
		}
	}
	// --ha names the etcd client Service.
	ha := flag(cc.Args, "ha")
	etcd := get("Service/weir-etcd-client").(*corev1.Service)
	if want := fmt.Sprintf("etcd://%s.weir.svc:%d/", etcd.Name, etcd.Spec.Ports[0].Port); !strings.HasPrefix(ha, want) {
		t.Errorf("--ha %q: want %s…", ha, want)
	}
	get("StatefulSet/weir-etcd")
	// The standby does not listen, so readiness makes the leader the
	// Service's only endpoint.
	svc := get("Service/weir-coordinator").(*corev1.Service)
	if p := cc.ReadinessProbe; p == nil || p.TCPSocket == nil || p.TCPSocket.Port.String() != "control" {
		t.Errorf("the coordinator's readiness probe %+v: want a TCP connect to its control port", p)
	}
	if !strings.HasSuffix(flag(cc.Args, "listen"), ":7700") || svc.Spec.Ports[0].Port != 7700 {
		t.Errorf("the coordinator listens at %q, its Service serves %d", flag(cc.Args, "listen"), svc.Spec.Ports[0].Port)
	}
	if join := flag(wc.Args, "join"); join != fmt.Sprintf("%s.weir.svc:%d", svc.Name, svc.Spec.Ports[0].Port) {
		t.Errorf("workers --join %q: want the coordinator Service", join)
	}
	// Workers: stable names, reached through their headless Service.
	if flag(wc.Args, "name") != "$(POD_NAME)" || worker.Spec.ServiceName != "weir-worker" {
		t.Errorf("workers are named %q with service %q: want $(POD_NAME), weir-worker", flag(wc.Args, "name"), worker.Spec.ServiceName)
	}
	if hs := get("Service/weir-worker").(*corev1.Service); hs.Spec.ClusterIP != "None" {
		t.Errorf("the workers' Service is not headless: %q", hs.Spec.ClusterIP)
	}
	if adv := flag(wc.Args, "advertise"); adv != "$(POD_NAME).weir-worker.weir.svc:7800" || !strings.HasSuffix(flag(wc.Args, "listen"), ":7800") {
		t.Errorf("workers advertise %q and listen at %q", adv, flag(wc.Args, "listen"))
	}
	// Every Secret a pod mounts or reads is in the manifests or made by
	// the command secrets.yaml gives.
	made := []string{"weir-certs"}
	for _, spec := range []corev1.PodSpec{coord.Spec.Template.Spec, worker.Spec.Template.Spec} {
		for _, v := range spec.Volumes {
			if s := v.Secret; s != nil && objs["Secret/"+s.SecretName] == nil && !slices.Contains(made, s.SecretName) {
				t.Errorf("a pod mounts Secret %s, which nothing makes", s.SecretName)
			}
		}
		for _, e := range spec.Containers[0].EnvFrom {
			if s := e.SecretRef; s != nil && objs["Secret/"+s.Name] == nil {
				t.Errorf("a pod reads Secret %s, which is not in the manifests", s.Name)
			}
		}
	}
	// Each workload's selector selects its pods.
	for key, o := range objs {
		var sel *metav1.LabelSelector
		var labels map[string]string
		switch o := o.(type) {
		case *appsv1.Deployment:
			sel, labels = o.Spec.Selector, o.Spec.Template.Labels
		case *appsv1.StatefulSet:
			sel, labels = o.Spec.Selector, o.Spec.Template.Labels
		default:
			continue
		}
		for k, v := range sel.MatchLabels {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, its pods are labelled %v", key, k, v, labels)
			}
		}
	}
}
