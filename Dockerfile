# syntax=docker/dockerfile:1
# The operator image (default target) and the example worker image:
#   docker build -t swarm-operator:latest .
#   docker build --target worker -t swarm-worker:latest .

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
COPY --from=build /out/swarm-worker /usr/local/bin/swarm-worker
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/swarm-worker"]

FROM gcr.io/distroless/static-debian12:nonroot AS operator
COPY --from=build /out/swarm-operator /usr/local/bin/swarm-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/swarm-operator"]
CMD ["run"]
