# Aggregation image: Python 3.11, no CUDA and no torch; lockfiles/aggregate.txt, the rcea and aggregate
# packages. CPU only: reads data/infer/<scale>/tables, writes data/results/<scale>.
# Build: invoke build --role aggregate   (docker compose build aggregate; UID/GID come from .env)
# Bases (build args): the public python:3.11-slim-bookworm and uv images; where no image registry answers,
# scripts/engine's local rcea/base:bookworm (Debian's python3 = 3.11) and rcea/uv:0.13.9 (invoke build passes them).
# Behind a proxy or mirror: the BuildKit secret `ca_bundle` (a CA bundle, mounted for the install step only,
# never stored in the image) and the build arg PYPI_INDEX_URL (README, "Building the images").
# Pin the public bases by digest (`@sha256:...`) at the first real build; the digest cannot be looked up offline.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.9

FROM ${UV_IMAGE} AS uv

FROM ${PYTHON_IMAGE}
ARG APP_UID=1000
ARG APP_GID=1000
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_NO_CACHE=1 UV_PYTHON_DOWNLOADS=never \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/workspace RCEA_DATA=/workspace/data \
    HOME=/home/rcea USER=rcea PYTHONUNBUFFERED=1
COPY --from=uv /uv /usr/local/bin/uv

# The base's own Python 3.11 (never downloaded), and the locked environment: hashes required, no
# resolution, wheels only.
RUN uv venv --python python3.11 /opt/venv
ARG LOCK=aggregate
ARG PYPI_INDEX_URL=""
COPY lockfiles/${LOCK}.txt /tmp/lock.txt
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi \
 && uv pip install ${PYPI_INDEX_URL:+--index-url "$PYPI_INDEX_URL"} \
        --require-hashes --no-deps --only-binary :all: -r /tmp/lock.txt \
 && uv pip check \
 && echo "${LOCK}.txt:sha256:$(sha256sum /tmp/lock.txt | cut -c1-16)" > /opt/venv/rcea-lockfile.txt \
 && rm /tmp/lock.txt

# A numeric non-root user (the host's UID/GID, so bind mounts and named volumes stay writable).
RUN if [ "${APP_UID}" = 0 ]; then echo "APP_UID must not be 0 (root)" >&2; exit 1; fi \
 && (getent group "${APP_GID}" || groupadd --gid "${APP_GID}" rcea) \
 && useradd --non-unique --uid "${APP_UID}" --gid "${APP_GID}" --home-dir /home/rcea --create-home rcea \
 && mkdir -p /workspace/data \
 && chown -R "${APP_UID}:${APP_GID}" /workspace

# The commit the code below comes from (`invoke build` passes it; manifests read it, rcea/provenance.py).
ARG RCEA_GIT_COMMIT=unknown
ENV RCEA_GIT_COMMIT=${RCEA_GIT_COMMIT}
WORKDIR /workspace
COPY rcea /workspace/rcea
COPY mathdata /workspace/mathdata
COPY aggregate /workspace/aggregate
COPY configs /workspace/configs
USER ${APP_UID}:${APP_GID}
# Aggregation is a batch job and serves nothing, so there is nothing for a health check to probe.
HEALTHCHECK NONE
CMD ["python", "-m", "aggregate", "--help"]
