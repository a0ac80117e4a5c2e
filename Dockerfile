# Build the manager image with a container engine (make docker-build). Without one,
# `make image` builds the same image with hack/image; docs/install.md compares the two.
FROM golang:1.27 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown

WORKDIR /workspace
# Cache dependencies before copying the source, so source changes do not re-download them.
COPY go.mod go.sum ./
RUN go mod download

COPY main.go manager.go ./
COPY api/ api/
COPY controllers/ controllers/
COPY internal/ internal/
# The channel files and packages are embedded into the binary (channels/embed.go).
COPY channels/ channels/

# CGO_ENABLED=0 gives a static binary for the distroless base image.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -tags without_exec_applier,without_direct_applier -trimpath \
    -ldflags="-s -w -X github.com/kaddons/kaddons/internal/version.Version=${VERSION} -X github.com/kaddons/kaddons/internal/version.Revision=${REVISION}" \
    -o manager .

# distroless/static: no shell, no package manager; CA certificates; the non-root user 65532.
FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/kaddons/kaddons" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
WORKDIR /
COPY --from=builder /workspace/manager /manager
USER 65532:65532

ENTRYPOINT ["/manager"]
