# m0serve as a container entrypoint, from the wheel: `scripts/wheels.sh` (dist/), then
# `docker build -t m0serve .`. An image FROM this one copies the app into /app and sets CMD
# to its `module:attr` (docs/deploy/README.md, "A container").
# The base: any image with CPython 3.9-3.13 and its venv module; python:3.12-slim for users
# (`--build-arg BASE_IMAGE=...` for another; CI builds on a Debian 12 base it makes with
# debootstrap, scripts/container-check.sh).
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}
# The wheel for the base's Python (manylinux2014) from dist/; nothing is compiled. Into a
# virtualenv, /opt/m0serve: a distribution's Python refuses system-wide installs (PEP 668),
# and the app's packages go there too. `--no-index`: the wheels of dist/ only.
COPY dist /tmp/dist
RUN python3 -m venv /opt/m0serve \
    && /opt/m0serve/bin/pip install --no-cache-dir --no-index --find-links /tmp/dist m0serve-wsgi \
    && rm -rf /tmp/dist
COPY examples /app
WORKDIR /app
# Python's output unbuffered (the app's prints reach `docker logs` as they happen); listen
# on every interface inside the container; every flag is also an M0SERVE_ variable.
ENV PATH=/opt/m0serve/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    M0SERVE_HOST=0.0.0.0 \
    M0SERVE_PORT=8000 \
    M0SERVE_APP_DIR=/app
EXPOSE 8000
# m0serve is PID 1: it reaps orphaned processes, and SIGTERM (docker stop) drains the
# requests in flight within --graceful-timeout (keep docker's stop timeout above it).
STOPSIGNAL SIGTERM
ENTRYPOINT ["m0serve"]
CMD ["hello:app"]
