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

# The dashboard's queries parse as PromQL: each becomes a recording rule promtool checks (JSON is YAML),
# with Grafana's variables replaced by values.
if ! command -v jq >/dev/null 2>&1; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >/dev/null
fi
rules="$(mktemp --suffix=.yaml)"
trap 'rm -f "$rules"' EXIT
jq '{groups: [{name: "dashboard", rules: ([.panels[].targets[]?.expr
	| gsub("\\$__rate_interval"; "5m") | gsub("\\$instance"; ".*")]
	| to_entries | map({record: "dashboard:query_\(.key)", expr: .value}))}]}' \
	deploy/grafana/strata-dashboard.json >"$rules"
echo "Checking the queries of deploy/grafana/strata-dashboard.json"
promtool check rules "$rules"
