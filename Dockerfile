# syntax=docker/dockerfile:1
# Build stage: the release binary, with dependencies cached in their own layer. No debug
# info and stripped symbols in the image: a smaller image; panics still name their place.
FROM rust:1-slim-bookworm AS build
ENV CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && echo 'fn main() {}' > benches/progress.rs \
    && cargo build --release --locked --bin catalog-jobs \
    && rm -rf src benches
COPY src ./src
COPY benches ./benches
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin catalog-jobs

# Runtime stage: slim, non-root, with the demo feeds in FEEDS_DIR so the quickstart works in
# a container (compose mounts a named volume there, which starts with these feeds).
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home /app catalog
WORKDIR /app
COPY --from=build /src/target/release/catalog-jobs /usr/local/bin/catalog-jobs
COPY --chown=catalog examples/feeds /feeds
USER catalog
# No MIMALLOC_PURGE_DELAY: the binary has its allocator give freed pages back at once itself
# (set one here only to choose another value; docs/configuration.md).
ENV BIND_ADDR=0.0.0.0:8001 LOG_FORMAT=json FEEDS_DIR=/feeds
EXPOSE 8001
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD curl -fs http://127.0.0.1:8001/healthz || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/catalog-jobs"]
