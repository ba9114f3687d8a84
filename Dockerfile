# Petri's images: one build stage, one minimal image per binary.
#
#   docker build --target petri-operator -t ghcr.io/petri-dev/petri-operator:v0.1.0 .
#   docker build --target petri-sync     -t ghcr.io/petri-dev/petri-sync:v0.1.0 .
#   docker build --target petri-deployer -t ghcr.io/petri-dev/petri-deployer:v0.1.0 .
#
# (make docker-build builds all three.) The binaries are static (CGO off), the
# images hold nothing but the binary, CA certificates and, for the deployer,
# the example charts under /charts; they run as the non-root user 65532.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY api/ api/
COPY cmd/petri-operator/ cmd/petri-operator/
COPY cmd/petri-sync/ cmd/petri-sync/
COPY cmd/petri-deployer/ cmd/petri-deployer/
COPY controllers/ controllers/
COPY deployer/ deployer/
COPY sync/ sync/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/petri-operator ./cmd/petri-sync ./cmd/petri-deployer

# The common base: no shell, no package manager, CA certificates for GitHub,
# git hosts, chart repositories and registries.
FROM scratch AS base
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532

FROM base AS petri-operator
COPY --from=build /out/petri-operator /petri-operator
ENTRYPOINT ["/petri-operator"]

FROM base AS petri-sync
COPY --from=build /out/petri-sync /petri-sync
ENTRYPOINT ["/petri-sync"]

# The operator starts this image's /petri-deployer in every Job. Charts under
# /charts can be referenced by path (repository: /charts). Helm's caches go to
# the Job's writable /tmp.
FROM base AS petri-deployer
COPY --from=build /out/petri-deployer /petri-deployer
COPY examples/charts/ /charts/
ENV HOME=/tmp
ENTRYPOINT ["/petri-deployer"]
