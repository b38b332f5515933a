# m0serve as a container entrypoint, from the wheel: `scripts/wheels.sh` (dist/), then
# `docker build -t m0serve .`. An image FROM this one copies the app into /app and sets CMD
# to its `module:attr` (docs/deploy/README.md, "A container").
FROM python:3.12-slim
# The wheel for this image's Python (cp312, manylinux2014) from dist/; nothing is compiled.
# `--no-index`: the wheels of dist/ only (the distribution is m0serve-wsgi).
COPY dist /tmp/dist
RUN pip install --no-cache-dir --no-index --find-links /tmp/dist m0serve-wsgi \
    && rm -rf /tmp/dist
COPY examples /app
WORKDIR /app
# Python's output unbuffered (the app's prints reach `docker logs` as they happen); listen
# on every interface inside the container; every flag is also an M0SERVE_ variable.
ENV PYTHONUNBUFFERED=1 \
    M0SERVE_HOST=0.0.0.0 \
    M0SERVE_PORT=8000 \
    M0SERVE_APP_DIR=/app
EXPOSE 8000
# m0serve is PID 1: it reaps orphaned processes, and SIGTERM (docker stop) drains the
# requests in flight within --graceful-timeout (keep docker's stop timeout above it).
STOPSIGNAL SIGTERM
ENTRYPOINT ["m0serve"]
CMD ["hello:app"]
