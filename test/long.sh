#!/usr/bin/env bash
# The long run: every test with the race detector and STRATA_TEST_LONG=1 (the SIGKILL loops, the
# black-holed stores, the two-sidecar load run, the every-call crash windows on every engine and the
# full random rounds of the conformance suite), then the chaos benchmark's smoke run. It starts the
# servers it needs on loopback (.ci/services.sh) and exits non-zero on the first failure. .ci/run
# calls it after the quick command; README gives its measured time.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=/dev/null
. .ci/services.sh
export STRATA_TEST_LONG=1

echo "long: go test -race -timeout 45m ./... (STRATA_TEST_LONG=1)"
# test/oplogs cuts a drain, and a batch drain, at every storage call on every engine under the race
# detector: more than go test's default ten minutes for one package.
go test -race -timeout 45m ./...

# Latency injected on PostgreSQL through a proxy. It asserts correctness only (every entry read back
# exactly once, every stranded oplog archived, no scheduled row fired twice) and exits non-zero
# otherwise; its timings are not judged here.
echo "long: strata bench chaos --quick"
go run ./cmd/strata bench chaos --quick --plot "" --postgres "$STRATA_TEST_POSTGRES_URL"
