# syntax=docker/dockerfile:1
# strata's image: `docker build -t strata .` (optionally --build-arg VERSION=v1.2.3).
#
# The build stage compiles with cgo (go-sqlite3 is C) on Debian 12 through deploy/build.sh, the same
# script a build outside Docker runs; the runtime stage is distroless/base-debian12 (glibc 2.36 to match
# the builder's, CA certificates for https object storage, tzdata, no shell, no package manager) as its
# non-root user 65532. Pin both bases by digest in a release pipeline.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# gcc and libc6-dev are in the golang:*-bookworm image already.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The context has no .git: name the commit and branch for strata_build_info (--build-arg
# REVISION="$(git rev-parse HEAD)" --build-arg BRANCH="$(git branch --show-current)"), else "unknown".
ARG VERSION="" REVISION="" BRANCH=""
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    STRATA_VERSION="$VERSION" STRATA_REVISION="$REVISION" STRATA_BRANCH="$BRANCH" sh deploy/build.sh /out/strata \
 && mkdir -p /out/state

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/strata /usr/local/bin/strata
# The working directory, where the default sqlite: and fs: URLs (relative) live; on Kubernetes it is
# an emptyDir, as the root file system is read-only.
COPY --from=build --chown=65532:65532 /out/state /var/lib/strata
WORKDIR /var/lib/strata
USER 65532:65532
# The HTTP API and /metrics. Off loopback (STRATA_HTTP_LISTEN=0.0.0.0:9464) strata requires
# STRATA_HTTP_TOKEN; the default listener, 127.0.0.1:9464, serves the pod's other containers only.
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/strata", "run"]
