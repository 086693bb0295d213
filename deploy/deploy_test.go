// Package deploy_test checks the deployment files against what strata does: the Kubernetes manifest's
// probes and scrape reach the port strata listens on, off loopback; the token comes from a Secret; no
// replica shares a volume; the container runs unprivileged; the Dockerfile builds through
// deploy/build.sh. One test starts the binary deploy/build.sh builds with the manifest's configuration
// and environment and asks it what kubelet and Prometheus would.
package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const manifestPath = "kubernetes.yaml"

// manifest is deploy/kubernetes.yaml, decoded strictly (an unknown field is an error here too).
type manifest struct {
	configMaps  map[string]corev1.ConfigMap
	deployments []appsv1.Deployment
	pvcs        []corev1.PersistentVolumeClaim
}

func loadManifest(t *testing.T) manifest {
	t.Helper()
	raw, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	m := manifest{configMaps: map[string]corev1.ConfigMap{}}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		switch head.Kind {
		case "":
			continue // only comments
		case "ConfigMap":
			var cm corev1.ConfigMap
			strict(t, i, doc, &cm)
			m.configMaps[cm.Name] = cm
		case "Deployment":
			var d appsv1.Deployment
			strict(t, i, doc, &d)
			m.deployments = append(m.deployments, d)
		case "PersistentVolumeClaim":
			var pvc corev1.PersistentVolumeClaim
			strict(t, i, doc, &pvc)
			m.pvcs = append(m.pvcs, pvc)
		case "Secret":
			t.Fatalf("document %d: a Secret in the manifest; secrets are created outside it (kubectl create secret)", i)
		default:
			// Other kinds are schema-checked by kubectl-validate (.ci/checks.d/manifests.sh) only.
		}
	}
	if len(m.deployments) != 1 {
		t.Fatalf("%d Deployments in %s, want 1", len(m.deployments), manifestPath)
	}
	return m
}

func strict(t *testing.T, i int, doc string, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
		t.Fatalf("document %d: %v", i, err)
	}
}

// strataContainer is the container running the strata image: a native sidecar (an init container with
// restartPolicy Always) or a plain container.
func strataContainer(t *testing.T, d appsv1.Deployment) corev1.Container {
	t.Helper()
	spec := d.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		if strings.Contains(c.Image, "strata") {
			return c
		}
	}
	t.Fatalf("Deployment %s: no container runs a strata image", d.Name)
	return corev1.Container{}
}

func envVar(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// expand resolves $(VAR) references as kubelet does, against the values given.
func expand(s string, vars map[string]string) string {
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := vars[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// listenAddress is strata's http.listen for a pod with podIP, as strata resolves it: the container's
// STRATA_HTTP_LISTEN over the mounted strata.toml's [http] listen over the default.
func listenAddress(t *testing.T, m manifest, c corev1.Container, podIP string) string {
	t.Helper()
	listen := "127.0.0.1:9464" // config's default
	if v := tomlValue(t, strataConfig(t, m), "http", "listen"); v != "" {
		listen = v
	}
	if e, ok := envVar(c, "STRATA_HTTP_LISTEN"); ok {
		listen = e.Value
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			vars[e.Name] = podIP
		}
	}
	return expand(listen, vars)
}

// probePort resolves a probe's port, by name or number, to a container port number.
func probePort(t *testing.T, c corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	t.Fatalf("container %s: a probe names port %q, which the container does not declare", c.Name, p.StrVal)
	return 0
}

func TestManifest_ProbesAndScrapeReachTheListener(t *testing.T) {
	m := loadManifest(t)
	d := m.deployments[0]
	c := strataContainer(t, d)

	listen := listenAddress(t, m, c, "10.1.2.3")
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("http.listen %q: %v", listen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Fatalf("strata listens on %q, loopback: kubelet's probes and the scrape arrive at the pod IP", listen)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("http.listen %q: port %v", listen, err)
	}

	declared := false
	for _, cp := range c.Ports {
		declared = declared || int(cp.ContainerPort) == port
	}
	if !declared {
		t.Errorf("container %s does not declare containerPort %d, the port it listens on", c.Name, port)
	}

	probes := map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe}
	for name, p := range probes {
		if p == nil {
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("%s: not an httpGet probe", name)
			continue
		}
		if got := probePort(t, c, p.HTTPGet.Port); got != port {
			t.Errorf("%s probes port %d; strata listens on %d", name, got, port)
		}
		if p.HTTPGet.Host != "" {
			t.Errorf("%s sets host %q; kubelet must probe the pod IP", name, p.HTTPGet.Host)
		}
		if p.HTTPGet.Path != "/healthz" && p.HTTPGet.Path != "/readyz" {
			t.Errorf("%s probes %s; strata's probes are /healthz and /readyz", name, p.HTTPGet.Path)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("container %s: want a livenessProbe on /healthz", c.Name)
	}
	// The readiness decision (README, Deployment): strata gates neither the executor's readiness nor,
	// as a native sidecar, its start.
	if c.ReadinessProbe != nil {
		t.Errorf("container %s has a readinessProbe: a pod is Ready only when every container is, so it would take the executor out of its Service on a storage blip (README, Deployment)", c.Name)
	}
	if c.StartupProbe != nil && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
		t.Errorf("native sidecar %s has a startupProbe: it would hold the executor's start until strata opens its storage (README, Deployment)", c.Name)
	}

	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" {
		t.Errorf("pod annotation prometheus.io/scrape = %q, want \"true\"", ann["prometheus.io/scrape"])
	}
	if ann["prometheus.io/port"] != strconv.Itoa(port) {
		t.Errorf("pod annotation prometheus.io/port = %q; strata listens on %d", ann["prometheus.io/port"], port)
	}
	if p := ann["prometheus.io/path"]; p != "" && p != "/metrics" {
		t.Errorf("pod annotation prometheus.io/path = %q, want /metrics", p)
	}
}

func TestManifest_SecretsComeFromSecrets(t *testing.T) {
	m := loadManifest(t)
	c := strataContainer(t, m.deployments[0])
	for _, name := range []string{"STRATA_HTTP_TOKEN", "PGPASSWORD"} {
		e, ok := envVar(c, name)
		if !ok {
			t.Errorf("container %s: no %s", c.Name, name)
			continue
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("container %s: %s must come from a secretKeyRef", c.Name, name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional {
			t.Errorf("container %s: %s is optional; strata off loopback cannot start without it", c.Name, name)
		}
	}
	for _, cm := range m.configMaps {
		for key, text := range cm.Data {
			if regexp.MustCompile(`(?i)(token|password)\s*=|://[^/@\s"]*:[^/@\s"]*@`).MatchString(text) {
				t.Errorf("ConfigMap %s key %s holds a secret; secrets go in the Secret", cm.Name, key)
			}
		}
	}
}

func TestManifest_NoSharedVolumeAndBlobsByURL(t *testing.T) {
	m := loadManifest(t)
	d := m.deployments[0]
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			t.Errorf("volume %s is the PVC %s, which every replica of the Deployment would share; blobs go to object storage", v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, pvc := range m.pvcs {
		for _, mode := range pvc.Spec.AccessModes {
			if mode == corev1.ReadWriteMany {
				t.Errorf("PersistentVolumeClaim %s is ReadWriteMany", pvc.Name)
			}
		}
	}
	blob := tomlValue(t, strataConfig(t, m), "blob", "url")
	if blob == "" || strings.HasPrefix(blob, "fs:") || strings.HasPrefix(blob, "file:") || strings.HasPrefix(blob, "mem") {
		t.Errorf("blob.url %q: want object storage (s3://bucket/prefix?region=…), not a local directory or memory", blob)
	}
}

func TestManifest_RunsUnprivileged(t *testing.T) {
	m := loadManifest(t)
	d := m.deployments[0]
	pod := d.Spec.Template.Spec.SecurityContext
	c := strataContainer(t, d)
	sc := c.SecurityContext
	if sc == nil {
		t.Fatalf("container %s: no securityContext", c.Name)
	}
	nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
	if !nonRoot {
		t.Errorf("container %s: runAsNonRoot is not true", c.Name)
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		t.Errorf("container %s: runAsUser 0", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
	}
	if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container %s: capabilities must drop ALL and add none", c.Name)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && pod != nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container %s: seccompProfile is not RuntimeDefault", c.Name)
	}

	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || limit.IsZero() {
		t.Errorf("container %s: no memory limit", c.Name)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		t.Errorf("container %s: no memory request", c.Name)
	}
	e, ok := envVar(c, "GOMEMLIMIT")
	if !ok || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("container %s: GOMEMLIMIT must come from resourceFieldRef limits.memory", c.Name)
	} else if div := e.ValueFrom.ResourceFieldRef.Divisor; !div.IsZero() && div.Value() != 1 {
		t.Errorf("container %s: GOMEMLIMIT's divisor %s; Go reads a bare number as bytes", c.Name, div.String())
	}
	if links := d.Spec.Template.Spec.EnableServiceLinks; links == nil || *links {
		t.Errorf("enableServiceLinks is not false: a Service named strata-http would inject STRATA_HTTP_PORT, which strata refuses")
	}
}

// strataConfig is the strata.toml the container mounts from a ConfigMap.
func strataConfig(t *testing.T, m manifest) string {
	t.Helper()
	d := m.deployments[0]
	c := strataContainer(t, d)
	config := ""
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			config = c.Args[i+1]
		}
	}
	if config == "" {
		t.Fatalf("container %s: no --config argument", c.Name)
	}
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(config, vm.MountPath+"/") {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				text, ok := m.configMaps[v.ConfigMap.Name].Data[strings.TrimPrefix(config, vm.MountPath+"/")]
				if !ok {
					t.Fatalf("ConfigMap %s has no key for %s", v.ConfigMap.Name, config)
				}
				return text
			}
		}
	}
	t.Fatalf("container %s: --config %s is not in a mounted ConfigMap", c.Name, config)
	return ""
}

// tomlValue is the string value of key in [section]: the simple `key = "value"` lines the manifest uses.
func tomlValue(t *testing.T, text, section, key string) string {
	t.Helper()
	current := ""
	line := regexp.MustCompile(`^\s*([A-Za-z0-9_]+)\s*=\s*"([^"]*)"`)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "[") {
			current = strings.Trim(l, "[] ")
			continue
		}
		if m := line.FindStringSubmatch(l); m != nil && current == section && m[1] == key {
			return m[2]
		}
	}
	return ""
}

// TestDockerfile_BuildsThroughBuildScript: the image's binary is the one deploy/build.sh builds, so
// building with the script outside Docker (as the probe test below does) builds what the image runs.
func TestDockerfile_BuildsThroughBuildScript(t *testing.T) {
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	joined := regexp.MustCompile(`\\\n`).ReplaceAllString(text, " ")
	var runs []string
	for _, l := range strings.Split(joined, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "RUN ") {
			runs = append(runs, l)
		}
	}
	viaScript := 0
	for _, r := range runs {
		if strings.Contains(r, "go build") || strings.Contains(r, "go install") {
			t.Errorf("the Dockerfile builds with its own command, not deploy/build.sh: %s", strings.TrimSpace(r))
		}
		if strings.Contains(r, "deploy/build.sh") {
			viaScript++
		}
	}
	if viaScript != 1 {
		t.Errorf("%d RUN lines run deploy/build.sh, want 1", viaScript)
	}
	script, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=1", "-trimpath", "./cmd/strata"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("deploy/build.sh lacks %s", want)
		}
	}

	stages := regexp.MustCompile(`(?m)^FROM\s`).Split(text, -1)
	runtime := stages[len(stages)-1]
	if !regexp.MustCompile(`(?m)^USER\s+[1-9][0-9]*(:[0-9]+)?\s*$`).MatchString(runtime) {
		t.Errorf("the runtime stage does not set a numeric non-root USER (runAsNonRoot needs a numeric one)")
	}
	if !regexp.MustCompile(`(?m)^ENTRYPOINT\s+\["[^"]*strata",\s*"run"\]`).MatchString(runtime) {
		t.Errorf("the runtime stage's ENTRYPOINT is not strata run")
	}
	m := loadManifest(t)
	_, port, _ := net.SplitHostPort(listenAddress(t, m, strataContainer(t, m.deployments[0]), "10.1.2.3"))
	if !regexp.MustCompile(`(?m)^EXPOSE\s+` + port + `\b`).MatchString(runtime) {
		t.Errorf("the runtime stage does not EXPOSE %s, the port the manifest listens on", port)
	}
}

// TestManifest_StrataServesProbesWithoutToken starts the binary deploy/build.sh builds with the
// manifest's strata.toml and the container's environment: the pod IP is a loopback address here (the
// only kind this test may listen on) and the port is the manifest's. Storage that is not reachable
// from a test (PostgreSQL, S3) is replaced by local SQLite and a directory; everything else, token
// included, is the manifest's. kubelet's probes and Prometheus come without a token: they must get an
// answer, not 401, while a write without the token must get 401.
func TestManifest_StrataServesProbesWithoutToken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds strata with deploy/build.sh; skipped with -short")
	}
	m := loadManifest(t)
	d := m.deployments[0]
	c := strataContainer(t, d)
	dir := t.TempDir()

	bin := filepath.Join(dir, "strata")
	build := exec.Command("sh", "build.sh", bin)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("deploy/build.sh: %v", err)
	}

	config := filepath.Join(dir, "strata.toml")
	if err := os.WriteFile(config, []byte(strataConfig(t, m)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The image's ENTRYPOINT (strata run) and then the container's args, as the container runtime does.
	args := append(entrypointArgs(t), c.Args...)
	for i := range args {
		if i > 0 && args[i-1] == "--config" {
			args[i] = config
		}
	}

	podIP := freeLoopback(t, listenAddress(t, m, c, "10.1.2.3"), c)
	const token = "test-token-from-the-secret"
	vars := map[string]string{}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = expand(e.Value, vars)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			v = podIP
		case e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == "http-token":
			v = token
		case e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, "AWS_"):
			// The object store's credentials: the local S3 server's (it takes any), if it runs.
			if v = os.Getenv(e.Name); v == "" {
				continue
			}
		case e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional:
			continue // an optional key the test's Secret does not have
		case e.ValueFrom.SecretKeyRef != nil:
			v = "secret-" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			q := c.Resources.Limits[corev1.ResourceMemory]
			v = strconv.FormatInt(q.Value(), 10)
		default:
			t.Fatalf("env %s: a source this test does not know how to fill", e.Name)
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	listen := listenAddress(t, m, c, podIP)
	env = append(env,
		"STRATA_STORAGE_URL=sqlite://"+filepath.Join(dir, "strata.db"),
		"STRATA_SCHEDULE_URL=sqlite://"+filepath.Join(dir, "strata.db"),
		"STRATA_BLOB_URL="+localBlobURL(t, tomlValue(t, strataConfig(t, m), "blob", "url"), dir),
		"AWS_EC2_METADATA_DISABLED=true", // no outside network: never ask for instance credentials
	)

	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("strata's output:\n%s", stderr.String())
		}
	}()

	base := "http://" + listen
	client := &http.Client{Timeout: 30 * time.Second}
	get := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// Wait for the listener as the startupProbe does (no timing is asserted: the wait is generous).
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("strata exited before listening on %s: %v", listen, err)
		default:
		}
		if conn, err := net.Dial("tcp", listen); err == nil {
			conn.Close()
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("strata is not listening on %s after 2 minutes", listen)
		}
	}

	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe} {
		if p == nil {
			continue
		}
		if code, body := get("GET", p.HTTPGet.Path, "", ""); code != http.StatusOK {
			t.Errorf("probe GET %s without a token: %d %s, want 200", p.HTTPGet.Path, code, body)
		}
	}
	if code, body := get("GET", "/readyz", "", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz without a token and before an assignment: %d %s, want 503", code, body)
	}
	code, body := get("GET", d.Spec.Template.Annotations["prometheus.io/path"], "", "")
	if code != http.StatusOK || !strings.Contains(body, "# TYPE ") {
		t.Errorf("the scrape, GET /metrics without a token: %d, want 200 with an exposition:\n%.500s", code, body)
	}
	// build.sh names the branch, which the toolchain does not record, for strata_build_info.
	if out, err := exec.Command("git", "rev-parse", "--abbrev-ref", "HEAD").Output(); err == nil {
		if branch := strings.TrimSpace(string(out)); branch != "HEAD" &&
			!regexp.MustCompile(`(?m)^strata_build_info\{[^}]*branch="`+regexp.QuoteMeta(branch)+`"`).MatchString(body) {
			t.Errorf("strata_build_info does not name the branch %q build.sh built from:\n%s", branch,
				regexp.MustCompile(`(?m)^strata_build_info.*$`).FindString(body))
		}
	}

	assignment := `{"shard_count":1,"shards":[0],"lease_seconds":0}`
	if code, body := get("PUT", "/v1/assignment", "", assignment); code != http.StatusUnauthorized {
		t.Errorf("PUT /v1/assignment without the token: %d %s, want 401", code, body)
	}
	if code, body := get("PUT", "/v1/assignment", token, assignment); code != http.StatusOK {
		t.Errorf("PUT /v1/assignment with the token: %d %s, want 200", code, body)
	}
	if code, body := get("GET", "/readyz", "", ""); code != http.StatusOK {
		t.Errorf("GET /readyz without a token after an assignment: %d %s, want 200", code, body)
	}
	// Issue 12 and DESIGN §10: /v1/status needs the token whenever one is configured.
	if code, body := get("GET", "/v1/status", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/status without the token: %d %s, want 401", code, body)
	}
	if code, body := get("GET", "/v1/status", token, ""); code != http.StatusOK {
		t.Errorf("GET /v1/status with the token: %d %s, want 200", code, body)
	}

	// SIGTERM, as kubelet stops the container: strata drains and exits 0.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-exited
	stopped = true
	if err != nil {
		t.Errorf("strata after SIGTERM: %v", err)
	}
}

// localBlobURL is the manifest's blob URL pointed at the local S3-protocol server of
// STRATA_TEST_S3_URL (.ci/services.d/s3.sh): its scheme and key prefix, the server's bucket, endpoint
// and region. Without the server it is a directory under dir, and under CI=true a failure.
func localBlobURL(t *testing.T, manifestURL, dir string) string {
	t.Helper()
	local := os.Getenv("STRATA_TEST_S3_URL")
	if local == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("STRATA_TEST_S3_URL is not set; CI=true requires it (.ci/services.d/s3.sh)")
		}
		t.Logf("STRATA_TEST_S3_URL is not set: blob.url is a directory instead of %s", manifestURL)
		return "fs://" + filepath.Join(dir, "blobs")
	}
	want, err := url.Parse(manifestURL)
	if err != nil {
		t.Fatalf("blob.url %q: %v", manifestURL, err)
	}
	got, err := url.Parse(local)
	if err != nil {
		t.Fatalf("STRATA_TEST_S3_URL %q: %v", local, err)
	}
	if want.Scheme != got.Scheme {
		t.Skipf("blob.url is %s://, the local server speaks %s://", want.Scheme, got.Scheme)
	}
	q := want.Query()
	for k, vs := range got.Query() {
		q[k] = vs
	}
	got.Path, got.RawQuery = want.Path, q.Encode()
	return got.String()
}

// entrypointArgs is the runtime stage's ENTRYPOINT after the binary: ["run"] for ["/…/strata", "run"].
func entrypointArgs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	all := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindAllStringSubmatch(string(raw), -1)
	if len(all) == 0 {
		t.Fatal("the Dockerfile has no ENTRYPOINT in exec form")
	}
	var entrypoint []string
	if err := json.Unmarshal([]byte(all[len(all)-1][1]), &entrypoint); err != nil || len(entrypoint) == 0 {
		t.Fatalf("the Dockerfile's ENTRYPOINT %s: %v", all[len(all)-1][1], err)
	}
	return entrypoint[1:]
}

// freeLoopback is a loopback address standing in for the pod IP on which the manifest's port is free:
// 127.0.0.2 unless something there holds the port.
func freeLoopback(t *testing.T, listen string, c corev1.Container) string {
	t.Helper()
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 40; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
		if err == nil {
			ln.Close()
			return ip
		}
	}
	t.Fatalf("container %s: port %s is taken on 127.0.0.2 to 127.0.0.39", c.Name, port)
	return ""
}
