#!/usr/bin/env bash
# The alerting rules: promtool check rules (syntax, templates) and promtool test rules (each alert fires
# on the series that mean trouble, and not on a healthy instance). That every metric they name exists
# in a started sidecar's /metrics is a Go test (internal/sidecar/deploy_metrics_test.go).
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v promtool >/dev/null 2>&1; then
	if command -v apt-get >/dev/null 2>&1; then
		echo "ci: installing promtool (Debian package prometheus)"
		if ! apt-cache policy prometheus 2>/dev/null | grep -q 'Candidate: [0-9]'; then
			apt-get update -qq
		fi
		# policy-rc.d (or the absence of systemd) keeps the package's server from starting here.
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	else
		echo "ci: installing promtool with go install"
		go install github.com/prometheus/prometheus/cmd/promtool@v0.316.0
		PATH="$(go env GOPATH)/bin:$PATH"
	fi
fi
promtool --version | head -1

promtool check rules deploy/prometheus/alerts.yaml
promtool test rules deploy/prometheus/alerts_test.yaml
