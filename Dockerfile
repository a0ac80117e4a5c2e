# Build the manager binary.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Cache dependencies before copying the source, so source changes do not re-download them.
COPY go.mod go.sum ./
RUN go mod download

COPY main.go main.go
COPY api/ api/
COPY controllers/ controllers/
COPY internal/ internal/

# CGO_ENABLED=0 gives a static binary for the distroless base image.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -tags without_exec_applier,without_direct_applier -trimpath -ldflags="-s -w" -o manager .

# distroless/static: no shell, no package manager; runs as the non-root user 65532.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager /manager
# The channels (channel files and packages) ship next to the binary, where the Builtin
# manifest source of the configuration file finds them.
COPY channels/ /channels/
USER 65532:65532

ENTRYPOINT ["/manager"]
