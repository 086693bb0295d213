#!/bin/sh
# deploy/build.sh [OUT] builds strata's release binary, by default as ./strata. The Dockerfile's build
# stage runs this very script, so a binary built here with the same toolchain and C library (Debian
# 12, glibc 2.36, as the golang:*-bookworm builder) is the image's binary: same flags, same cgo.
# deploy/deploy_test.go checks that the Dockerfile still builds through it.
#
#   CGO_ENABLED=1   go-sqlite3 is C: it needs gcc and libc headers (Debian: apt-get install gcc libc6-dev)
#   -trimpath       no build machine paths in the binary
#   -ldflags -s -w  no symbol table or DWARF (the module's build info, read by `strata version`, stays)
#   STRATA_VERSION  optional: a release's version, linked in as internal/version.Override
set -eu
cd "$(dirname "$0")/.."
out="${1:-strata}"
ldflags="-s -w"
if [ -n "${STRATA_VERSION:-}" ]; then
	ldflags="$ldflags -X github.com/stratalog/strata/internal/version.Override=$STRATA_VERSION"
fi
export CGO_ENABLED=1
set -x
go build -trimpath -ldflags="$ldflags" -o "$out" ./cmd/strata
