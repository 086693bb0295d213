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
#   STRATA_BRANCH   optional: the branch, linked in as internal/version.Branch (strata_build_info's
#                   branch label); by default git's current branch, when there is a git checkout
#   STRATA_REVISION optional: the commit, linked in as internal/version.Commit for a build without
#                   .git (the Docker context); with .git the toolchain records it itself
set -eu
cd "$(dirname "$0")/.."
out="${1:-strata}"
ldflags="-s -w"
pkg=github.com/stratalog/strata/internal/version
if [ -n "${STRATA_VERSION:-}" ]; then
	ldflags="$ldflags -X $pkg.Override=$STRATA_VERSION"
fi
branch="${STRATA_BRANCH:-$(git rev-parse --abbrev-ref HEAD 2>/dev/null || true)}"
if [ -n "$branch" ] && [ "$branch" != HEAD ]; then # HEAD: a detached checkout names no branch
	ldflags="$ldflags -X $pkg.Branch=$branch"
fi
if [ -n "${STRATA_REVISION:-}" ]; then
	ldflags="$ldflags -X $pkg.Commit=$STRATA_REVISION"
fi
export CGO_ENABLED=1
set -x
go build -trimpath -ldflags="$ldflags" -o "$out" ./cmd/strata
