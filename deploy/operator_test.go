package deploy_test

import (
	"flag"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// The Prometheus Operator's objects for strata live in deploy/prometheus-operator, apart from
// deploy/*.yaml, because kubectl-validate's built-in schemas (.ci/checks.d/manifests.sh) have no
// monitoring.coreos.com CRDs: these tests decode them strictly with the operator's own API types
// instead, and hold them to what they must match, alerts.yaml and kubernetes.yaml.

var update = flag.Bool("update", false, "rewrite prometheus-operator/prometheusrule.yaml from prometheus/alerts.yaml")

const (
	alertsPath         = "prometheus/alerts.yaml"
	prometheusRulePath = "prometheus-operator/prometheusrule.yaml"
	podMonitorPath     = "prometheus-operator/podmonitor.yaml"
)

// prometheusRuleHeader opens the generated PrometheusRule, before alerts.yaml's groups.
const prometheusRuleHeader = `# Generated from deploy/prometheus/alerts.yaml by ` + "`go test -run TestPrometheusRule -update`" + ` in deploy/:
# do not edit; a test fails when the two differ. The alerting rules of alerts.yaml as a Prometheus
# Operator PrometheusRule (monitoring.coreos.com/v1): kubectl apply -f deploy/prometheus-operator/.
# The Prometheus resource picks rules by its ruleSelector (and ruleNamespaceSelector): give this the
# labels yours selects (kube-prometheus-stack: release: <its release name>). The rules select strata's
# targets by job="strata", which podmonitor.yaml sets.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: strata
  labels: {app.kubernetes.io/name: strata}
spec:
`

// prometheusRule is the PrometheusRule generated from alerts.yaml's text: the header, then the
// file from its groups on (comments included), indented under spec.
func prometheusRule(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i := strings.Index(text, "\ngroups:\n")
	if i < 0 {
		t.Fatalf("%s has no top-level groups:", alertsPath)
	}
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, line := range strings.SplitAfter(text[i+1:], "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.String()
}

// TestPrometheusRule_CarriesTheRulesOfAlertsYAML: the checked-in PrometheusRule is the one generated
// from alerts.yaml, and decoded strictly with the operator's types its groups equal alerts.yaml's.
func TestPrometheusRule_CarriesTheRulesOfAlertsYAML(t *testing.T) {
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(prometheusRulePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRulePath)
	if err != nil {
		t.Fatalf("%v: generate it with go test -run TestPrometheusRule -update", err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date with %s: run go test -run TestPrometheusRule -update in deploy/", prometheusRulePath, alertsPath)
	}

	var rule monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(got, &rule); err != nil {
		t.Fatalf("%s: %v", prometheusRulePath, err)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" || rule.Name == "" {
		t.Fatalf("%s: %s %s named %q, want a monitoring.coreos.com/v1 PrometheusRule with a name", prometheusRulePath, rule.APIVersion, rule.Kind, rule.Name)
	}
	rawAlerts, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var alerts struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rawAlerts, &alerts); err != nil {
		t.Fatalf("%s as the operator's rule groups: %v", alertsPath, err)
	}
	if len(alerts.Groups) == 0 || !reflect.DeepEqual(rule.Spec.Groups, alerts.Groups) {
		t.Fatalf("the PrometheusRule's groups differ from %s's", alertsPath)
	}
	names := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			names[r.Alert] = true
		}
	}
	for _, alert := range []string{"StrataDown", "StrataMetricsAbsent"} {
		if !names[alert] {
			t.Errorf("the PrometheusRule has no %s", alert)
		}
	}
}

// TestPodMonitor_SelectsTheStrataPodAndPort: the PodMonitor selects the Deployment's pods (in their
// namespace), scrapes the container port strata listens on, by name, at the annotations' path, and
// names the job strata, as the alerts and the annotations' prometheus.io/job do.
func TestPodMonitor_SelectsTheStrataPodAndPort(t *testing.T) {
	raw, err := os.ReadFile(podMonitorPath)
	if err != nil {
		t.Fatal(err)
	}
	var pm monitoringv1.PodMonitor
	if err := yaml.UnmarshalStrict(raw, &pm); err != nil {
		t.Fatalf("%s: %v", podMonitorPath, err)
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" || pm.Name == "" {
		t.Fatalf("%s: %s %s named %q, want a monitoring.coreos.com/v1 PodMonitor with a name", podMonitorPath, pm.APIVersion, pm.Kind, pm.Name)
	}

	m := loadManifest(t)
	d := m.deployments[0]
	c := strataContainer(t, d)
	selector, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatalf("%s: selector: %v", podMonitorPath, err)
	}
	if selector.Empty() || !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the PodMonitor's selector %s does not select the Deployment's pods (labels %v)", selector, d.Spec.Template.Labels)
	}
	if ns := pm.Spec.NamespaceSelector; ns.Any || len(ns.MatchNames) > 0 {
		t.Errorf("the PodMonitor looks beyond its own namespace (%+v); it is applied beside the Deployment", ns)
	}

	_, portText, err := net.SplitHostPort(listenAddress(t, m, c, "10.1.2.3"))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portText)
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("%d podMetricsEndpoints, want 1: strata's", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	named := 0
	for _, cp := range c.Ports {
		if cp.Name == ep.Port {
			named = int(cp.ContainerPort)
		}
	}
	if ep.Port == "" || named != port {
		t.Errorf("the PodMonitor scrapes port %q, which is container port %d; strata listens on %d (name the port it listens on)", ep.Port, named, port)
	}
	annotations := d.Spec.Template.Annotations
	if ep.Path != annotations["prometheus.io/path"] {
		t.Errorf("the PodMonitor scrapes path %q, the annotations %q", ep.Path, annotations["prometheus.io/path"])
	}
	if ep.Scheme != "" && ep.Scheme != "http" {
		t.Errorf("the PodMonitor scrapes over %s; strata serves plain http", ep.Scheme)
	}
	job := ""
	for _, r := range ep.RelabelConfigs {
		if r.TargetLabel == "job" && (r.Action == "" || strings.EqualFold(r.Action, "replace")) && r.Replacement != nil {
			job = *r.Replacement
		}
	}
	if job != "strata" || annotations["prometheus.io/job"] != "strata" {
		t.Errorf("the PodMonitor names the job %q and the annotations %q; the alerts select job=\"strata\"", job, annotations["prometheus.io/job"])
	}
}
