package deploy_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of deploy/kubernetes, decoded strictly into
// the Kubernetes API types: a misspelt or misplaced field is an error, as
// `kubectl apply --validate=strict` would make it.
type manifests struct {
	sts      *appsv1.StatefulSet
	services map[string]*corev1.Service
	config   *corev1.ConfigMap
	secret   *corev1.Secret
	pdb      *policyv1.PodDisruptionBudget
	files    []string
}

func readManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{services: map[string]*corev1.Service{}}
	paths, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, filepath.Base(p))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s #%d: %v", p, i, err)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 StatefulSet":
				m.sts = &appsv1.StatefulSet{}
				obj = m.sts
			case "v1 Service":
				s := &corev1.Service{}
				obj = s
				defer func() { m.services[s.Name] = s }()
			case "v1 ConfigMap":
				m.config = &corev1.ConfigMap{}
				obj = m.config
			case "v1 Secret":
				m.secret = &corev1.Secret{}
				obj = m.secret
			case "policy/v1 PodDisruptionBudget":
				m.pdb = &policyv1.PodDisruptionBudget{}
				obj = m.pdb
			default:
				t.Fatalf("%s #%d: unexpected %s %s", p, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s #%d (%s): %v", p, i, head.Kind, err)
			}
		}
	}
	return m
}

// TestKubernetesManifests: the manifests decode strictly; the kustomization
// lists them all; the pods are a StatefulSet whose pod name is the
// instance id, probed on /healthz and /readyz, not root; every secret the
// container reads is in the Secret; the ConfigMap is the production sample
// as it is; a Service per listener; a disruption budget over the same pods;
// and the configuration the pod would run, with the environment the
// manifests give it, passes `msgx serve --check`.
func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	if m.sts == nil || m.config == nil || m.secret == nil || m.pdb == nil {
		t.Fatalf("missing objects: %+v", m)
	}
	var kust struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	slices.Sort(kust.Resources)
	if !slices.Equal(kust.Resources, m.files) {
		t.Errorf("kustomization resources %v, files %v", kust.Resources, m.files)
	}

	pod := m.sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sel := m.sts.Spec.Selector.MatchLabels
	for k, v := range sel {
		if m.sts.Spec.Template.Labels[k] != v || m.pdb.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("label %s=%s: the pods, the StatefulSet and the disruption budget must agree", k, v)
		}
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("the pod must run as the image's non-root user 65532: %+v", pod.SecurityContext)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["ingress"] != 8080 || ports["admin"] != 8081 {
		t.Errorf("container ports %v", ports)
	}
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe, "/healthz ": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != strings.TrimSpace(name) || p.HTTPGet.Port.String() != "admin" {
			t.Errorf("probe %s: %+v", name, p)
		}
	}
	if p := c.StartupProbe; p != nil && p.PeriodSeconds*p.FailureThreshold < 120 {
		t.Errorf("the startup probe gives up after %d s, before the store's start timeout (2 min)", p.PeriodSeconds*p.FailureThreshold)
	}
	for name, port := range map[string]string{"msgx-ingress": "ingress", "msgx-admin": "admin"} {
		s := m.services[name]
		if s == nil || len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != port {
			t.Errorf("service %s for the %s listener: %+v", name, port, s)
		}
	}
	if h := m.services[m.sts.Spec.ServiceName]; h == nil || h.Spec.ClusterIP != "None" {
		t.Errorf("the StatefulSet's service %q must be headless", m.sts.Spec.ServiceName)
	}

	// The environment the container gets, with real values for the secrets.
	secrets := map[string]string{"store-dsn": "postgres://msgx:pw@db.internal:5432/msgx?sslmode=verify-full",
		"mailbox-dsn": "msgx:pw@tcp(mailbox.internal:3306)/legacy", "admin-read-token": randomToken(), "admin-operator-token": randomToken()}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GOFLAGS=" + os.Getenv("GOFLAGS")}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+m.sts.Name+"-0")
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if _, ok := m.secret.StringData[ref.Key]; !ok || ref.Name != m.secret.Name {
				t.Errorf("%s reads %s/%s, which the Secret does not have", e.Name, ref.Name, ref.Key)
			}
			env = append(env, e.Name+"="+secrets[ref.Key])
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Errorf("env %s: unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	if !slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, "MSGX_INSTANCE_ID=msgx-0") }) {
		t.Error("the pod name must be the instance id (MSGX_INSTANCE_ID from metadata.name)")
	}

	sample, err := os.ReadFile("msgx.production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.config.Data["msgx.yaml"]; got != string(sample) {
		t.Errorf("the ConfigMap's msgx.yaml is not deploy/msgx.production.yaml")
	}
	if !slices.Equal(c.Args, []string{"serve", "--config", "/etc/msgx/msgx.yaml"}) {
		t.Errorf("args %q", c.Args)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "msgx.yaml"), []byte(m.config.Data["msgx.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	check := exec.Command("go", "run", "../cmd/msgx", "serve", "--check", "--config", filepath.Join(dir, "msgx.yaml"))
	check.Env = append(env, "GOCACHE="+goEnv(t, "GOCACHE"), "GOMODCACHE="+goEnv(t, "GOMODCACHE"), "GOPATH="+goEnv(t, "GOPATH"))
	var out bytes.Buffer
	check.Stdout, check.Stderr = &out, &out
	if err := check.Run(); err != nil {
		t.Fatalf("msgx serve --check with the pod's configuration and environment: %v\n%s", err, out.String())
	}
	for _, e := range env {
		if k, v, _ := strings.Cut(e, "="); strings.HasSuffix(k, "_TOKEN") && strings.Contains(out.String(), v) {
			t.Errorf("serve --check printed the secret %s", k)
		}
	}
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatal(fmt.Errorf("go env %s: %w", key, err))
	}
	return strings.TrimSpace(string(out))
}

// TestSamples: every configuration sample passes `msgx serve --check` with
// its secrets in the environment, and the mailbox table docs/production.md
// tells to create is the one msgx creates.
func TestSamples(t *testing.T) {
	samples, err := filepath.Glob("msgx.*.yaml")
	if err != nil || len(samples) < 3 {
		t.Fatalf("samples: %v %v", samples, err)
	}
	for _, s := range samples {
		text, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		check := exec.Command("go", "run", "../cmd/msgx", "serve", "--check", "--config", s)
		check.Env = os.Environ()
		// The secrets a sample says it takes from the environment.
		for _, v := range []string{"MSGX_ADMIN_READ_TOKEN", "MSGX_ADMIN_OPERATOR_TOKEN", "MSGX_INGRESS_SENDERS_AODB_TOKEN"} {
			if bytes.Contains(text, []byte(v)) {
				check.Env = append(check.Env, v+"="+randomToken())
			}
		}
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", s, err, out)
		}
	}
	guide, err := os.ReadFile("../docs/production.md")
	if err != nil {
		t.Fatal(err)
	}
	sql, err := os.ReadFile("../source/mailbox/sql/mysql/mailbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, create, _ := strings.Cut(string(sql), "-- name: Create\n")
	create, _, _ = strings.Cut(create, "\n\n")
	if want := strings.ReplaceAll(create, "{{table}}", "cminmsgs"); !strings.Contains(string(guide), "```sql\n"+want+"\n```") {
		t.Errorf("docs/production.md does not show the mailbox table as msgx creates it:\n%s", want)
	}
}

// randomToken is a token as operators are told to make one (openssl rand
// -base64 32).
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}
