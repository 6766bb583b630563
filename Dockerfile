# syntax=docker/dockerfile:1
# The operator image (default target), the example worker image, the Python example worker's and
# the Go example worker's:
#   docker build -t swarm-operator:latest .
#   docker build --target worker -t swarm-worker:latest .
#   docker build --target python-worker -t swarm-python-worker:latest .
#   docker build --target go-worker -t swarm-go-worker:latest .

# What each image says it is, as the OCI annotation keys (labels here; scripts/build-images.sh
# writes them as the manifest's annotations and the config's labels, and
# tests/integration/images.rs holds the two equal):
#   docker build --build-arg VERSION=<Cargo.toml's> --build-arg REVISION="$(git rev-parse HEAD)" \
#       --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" ...
ARG VERSION=0.0.0-dev REVISION=0000000000000000000000000000000000000000 CREATED=1970-01-01T00:00:00Z

# Alpine's Rust builds for musl, which links statically: the binaries need no libc at run time.
FROM rust:1.95-alpine AS build
# jemalloc, the operator's allocator, is built from C with make.
RUN apk add --no-cache musl-dev make
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p swarm-operator --bin swarm-operator --example swarm-worker \
    && mkdir -p /out \
    && cp target/release/swarm-operator target/release/examples/swarm-worker /out/

FROM gcr.io/distroless/static-debian12:nonroot AS worker
ARG VERSION REVISION CREATED
LABEL org.opencontainers.image.source="https://github.com/swarm-operator/swarm-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /out/swarm-worker /usr/local/bin/swarm-worker
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/swarm-worker"]

# The Python example worker (examples/python-worker): its pinned packages, the whole closure,
# installed with --no-deps (wheels only) where distroless's Debian python3.11 reads them; without
# console scripts, kubernetes/aio (the asyncio client, which swarm_worker does not import) and
# the kubernetes package's tests, as scripts/build-images.sh leaves them out.
FROM python:3.11-slim-bookworm AS python-build
COPY examples/python-worker/requirements.txt /requirements.txt
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --no-compile \
        --only-binary=:all: --target /out/dist-packages --requirement /requirements.txt \
    && rm -rf /out/dist-packages/bin /out/dist-packages/kubernetes/aio \
    && find /out/dist-packages -name __pycache__ -prune -exec rm -rf {} + \
    && find /out/dist-packages/kubernetes -name '*_test.py' -delete

FROM gcr.io/distroless/python3-debian12:nonroot AS python-worker
ARG VERSION REVISION CREATED
LABEL org.opencontainers.image.source="https://github.com/swarm-operator/swarm-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=python-build /out/dist-packages /usr/lib/python3/dist-packages
# The worker's package, the files its wheel holds, run as `python -m swarm_worker` from /app.
COPY examples/python-worker/swarm_worker /app/swarm_worker
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH=/app
USER 65532:65532
ENTRYPOINT ["/usr/bin/python3.11", "-m", "swarm_worker"]

# The Go example worker (worker-go/examples/swarm-worker), static as scripts/go-worker.sh builds it.
FROM golang:1.26-bookworm AS go-build
WORKDIR /src
COPY worker-go/ .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" \
        -o /out/swarm-go-worker ./examples/swarm-worker

FROM gcr.io/distroless/static-debian12:nonroot AS go-worker
ARG VERSION REVISION CREATED
LABEL org.opencontainers.image.source="https://github.com/swarm-operator/swarm-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=go-build /out/swarm-go-worker /usr/local/bin/swarm-go-worker
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/swarm-go-worker"]

FROM gcr.io/distroless/static-debian12:nonroot AS operator
ARG VERSION REVISION CREATED
LABEL org.opencontainers.image.source="https://github.com/swarm-operator/swarm-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /out/swarm-operator /usr/local/bin/swarm-operator
USER 65532:65532
# /healthz and /readyz; /metrics (HTTPS).
EXPOSE 8080 8443
ENTRYPOINT ["/usr/local/bin/swarm-operator"]
CMD ["run"]
