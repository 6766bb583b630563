# syntax=docker/dockerfile:1
# The operator image (default target), the example worker image, the Python example worker's and
# the Go example worker's (the operator's tag is Cargo.toml's version, the one deploy/ and the
# chart install):
#   docker build -t swarm-operator:<version> .
#   docker build --target worker -t swarm-worker:<tag> .
#   docker build --target python-worker -t swarm-python-worker:<tag> .
#   docker build --target go-worker -t swarm-go-worker:<tag> .
#
# Every base image is pinned by digest (the multi-arch index's), its tag kept for readers. To
# move a pin, resolve the tag again and replace the digest, e.g. with crane
# (scripts/install-crane.sh builds the pinned one):
#   crane digest rust:1.95-bookworm
#   crane digest gcr.io/distroless/cc-debian12:nonroot
# The Rust builder's minor version is the toolchain's the tests use (rustc --version), Go's is
# worker-go/go.mod's; tests/integration/images/toolchain.rs fails when they, the pins or the
# build commands drift from scripts/build-images.sh's.

# What each image says it is, as the OCI annotation keys (labels here; scripts/build-images.sh
# writes them as the manifest's annotations and the config's labels, and
# tests/integration/images.rs holds the two equal):
#   docker build --build-arg VERSION=<Cargo.toml's> --build-arg REVISION="$(git rev-parse HEAD)" \
#       --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" ...
ARG VERSION=0.0.0-dev REVISION=0000000000000000000000000000000000000000 CREATED=1970-01-01T00:00:00Z

# The binaries scripts/build-images.sh builds and the tests run: glibc (Debian 12 bookworm's,
# as on the machines that build and test them), jemalloc as the allocator (built from C with
# make and cc, which this image has; .cargo/config.toml, in the build context, sets its
# configuration), the release profile of Cargo.toml (fat LTO, one codegen unit) and no other
# flags. They run on distroless/cc, which has glibc and libgcc_s.
FROM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p swarm-operator --bin swarm-operator --example swarm-worker \
    && mkdir -p /out \
    && cp target/release/swarm-operator target/release/examples/swarm-worker /out/

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS worker
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
FROM python:3.11-slim-bookworm@sha256:528257d48c1da0dcecc2e725d1ae34498d60c965f1241e39cd6a85a8859bdf84 AS python-build
COPY examples/python-worker/requirements.txt /requirements.txt
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --no-compile \
        --only-binary=:all: --target /out/dist-packages --requirement /requirements.txt \
    && rm -rf /out/dist-packages/bin /out/dist-packages/kubernetes/aio \
    && find /out/dist-packages -name __pycache__ -prune -exec rm -rf {} + \
    && find /out/dist-packages/kubernetes -name '*_test.py' -delete

FROM gcr.io/distroless/python3-debian12:nonroot@sha256:7d1042ce588ab97019fe95c24ffca7bc5a82ccdac572511d5e09bda4435c89c5 AS python-worker
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

# The Go example worker (worker-go/examples/swarm-worker), static as scripts/go-worker.sh builds it,
# with its settings: CGO_ENABLED=0, GOTOOLCHAIN=local, -mod=readonly -buildvcs=false -trimpath
# (its GOFLAGS) and -ldflags "-s -w".
FROM golang:1.26-bookworm@sha256:116d58cbd88c1297624acc6e967a060012422bacf9930927e23fb719189c6f36 AS go-build
WORKDIR /src
COPY worker-go/ .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOTOOLCHAIN=local go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" \
        -o /out/swarm-go-worker ./examples/swarm-worker

FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab AS go-worker
ARG VERSION REVISION CREATED
LABEL org.opencontainers.image.source="https://github.com/swarm-operator/swarm-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=go-build /out/swarm-go-worker /usr/local/bin/swarm-go-worker
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/swarm-go-worker"]

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS operator
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
