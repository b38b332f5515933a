# m0serve as a container entrypoint: `docker build -t m0serve .`, then an image FROM this
# one copies the app into /app and sets CMD to its `module:attr` (docs/operations.md).
#
# Build stage: a Rust toolchain on the same CPython the image runs, so the rpath build.rs
# records (to this libpython) holds in the runtime stage.
FROM python:3.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain 1.95.0
ENV PATH=/root/.cargo/bin:$PATH
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin m0serve

FROM python:3.11-slim
COPY --from=build /src/target/release/m0serve /usr/local/bin/m0serve
COPY examples /app
WORKDIR /app
# Listen on every interface inside the container; every flag is also an M0SERVE_ variable.
ENV M0SERVE_HOST=0.0.0.0 \
    M0SERVE_PORT=8000 \
    M0SERVE_APP_DIR=/app
EXPOSE 8000
# m0serve is PID 1: it reaps orphaned processes, and SIGTERM (docker stop) drains the
# requests in flight within --graceful-timeout (keep docker's stop timeout above it).
STOPSIGNAL SIGTERM
ENTRYPOINT ["m0serve"]
CMD ["hello:app"]
