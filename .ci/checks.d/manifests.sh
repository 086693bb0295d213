#!/usr/bin/env bash
# CI check of the deployment files, offline:
#   1. kubectl-validate against its built-in Kubernetes schemas on every manifest in deploy/ (not
#      deploy/prometheus or deploy/grafana, which are not Kubernetes objects, nor
#      deploy/prometheus-operator, whose PodMonitor and PrometheusRule are CRDs the built-in schemas
#      do not have: deploy/operator_test.go decodes them strictly with the operator's Go types);
#   2. deploy/'s own Go module: the manifest against what strata listens on (probes, scrape, token,
#      volumes, securityContext), the Dockerfile building through deploy/build.sh, and the binary
#      build.sh builds started with the manifest's configuration;
#   3. systemd-analyze security on deploy/strata.service: exposure 4.0 or less.
set -euo pipefail
cd "$(dirname "$0")/../.."

# v0.0.4 is the only version the module proxy serves; its built-in schemas stop at Kubernetes 1.30
# (1.31 and later it would fetch from GitHub). Native sidecars (restartPolicy on an init container)
# are in 1.30's schema.
kubectl_validate_version=v0.0.4
kubernetes_version=1.30
bin="$(go env GOPATH)/bin/kubectl-validate"
if ! go version -m "$bin" 2>/dev/null | grep -q "sigs.k8s.io/kubectl-validate[[:space:]]*$kubectl_validate_version"; then
	echo "manifests: installing sigs.k8s.io/kubectl-validate@$kubectl_validate_version"
	go install "sigs.k8s.io/kubectl-validate@$kubectl_validate_version"
fi
manifests=(deploy/*.yaml)
echo "manifests: kubectl-validate --version $kubernetes_version ${manifests[*]}"
# No kubeconfig: the built-in schemas only, never a cluster.
KUBECONFIG=/dev/null "$bin" --version "$kubernetes_version" "${manifests[@]}"

echo "manifests: go vet, staticcheck and go test in deploy/ (a module of its own, which the root's miss)"
staticcheck_bin="$(go env GOPATH)/bin/staticcheck" # .ci/run installs it
(
	cd deploy
	go vet ./...
	if [ -x "$staticcheck_bin" ]; then "$staticcheck_bin" ./...; fi
	go test -count=1 ./...
)

echo "manifests: systemd-analyze security deploy/strata.service"
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "manifests: installing systemd-analyze (Debian package systemd)"
	if ! apt-cache policy systemd 2>/dev/null | grep -q 'Candidate: [0-9]'; then
		apt-get update -qq
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
report=$(systemd-analyze security --offline=yes --no-pager deploy/strata.service 2>&1) || true
exposure=$(sed -n 's/.*Overall exposure level for strata.service: \([0-9.]*\).*/\1/p' <<<"$report")
if [ -z "$exposure" ]; then
	echo "$report" >&2
	echo "manifests: systemd-analyze printed no exposure level" >&2
	exit 1
fi
echo "manifests: strata.service exposure $exposure (at most 4.0)"
if ! awk -v e="$exposure" 'BEGIN { exit !(e <= 4.0) }'; then
	grep '✗' <<<"$report" >&2 || true
	echo "manifests: deploy/strata.service exposure $exposure is above 4.0" >&2
	exit 1
fi
