# Training image: CUDA 12.8 runtime, Python 3.11, lockfiles/train.txt (torch 2.8.0+cu128, vLLM 0.11.0,
# TRL 0.29.0, Transformers 4.57.6, PEFT 0.18.1, Datasets 4.6.1, bitsandbytes), the rcea and train packages.
# Build: invoke build --role train   (docker compose build train; UID/GID come from .env)
# Build args: CUDA_IMAGE (the base: the public CUDA image on a GPU host; where no image registry answers,
# scripts/engine's local rcea/base:bookworm, Debian 12), UV_IMAGE (likewise rcea/uv:0.13.9), LOCK (the
# lockfile: train, or train-cpu for the CPU image, `invoke build --cpu`), PYPI_INDEX_URL (a mirror).
# Wheels that no index serves (the CPU torch wheel of train-cpu.txt) come from docker/wheels/ in the build
# context (invoke build copies them from pip's find-links). A proxy's CA bundle comes in as the BuildKit
# secret `ca_bundle`, mounted for the install step only and never stored in the image.
# Pin the public bases by digest (`@sha256:...`) at the first real build; the digest cannot be looked up offline.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.9

FROM ${UV_IMAGE} AS uv

FROM ${CUDA_IMAGE}
ARG APP_UID=1000
ARG APP_GID=1000
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_NO_CACHE=1 UV_PYTHON_DOWNLOADS=never \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/workspace HF_HOME=/cache/hf RCEA_DATA=/workspace/data \
    HOME=/home/rcea USER=rcea PYTHONUNBUFFERED=1
COPY --from=uv /uv /usr/local/bin/uv

# Python 3.11 from the base's own packages (Ubuntu 22.04's python3.11, Debian 12's default python3) with
# its headers, and a C toolchain: Triton (pinned with torch) builds a small launcher module against
# Python.h with the system C compiler the first time a kernel runs, and vLLM compiles kernels when its
# engine starts. The version globs match both Ubuntu 22.04 (build-essential 12.9ubuntu3, python3.11
# 3.11.0) and Debian 12 (12.9, 3.11.2).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential=12.9* python3.11=3.11.* python3.11-dev=3.11.* \
 && rm -rf /var/lib/apt/lists/*

# The locked environment: hashes required, no resolution, wheels only.
RUN uv venv --python /usr/bin/python3.11 /opt/venv
ARG LOCK=train
ARG PYPI_INDEX_URL=""
COPY lockfiles/${LOCK}.txt /tmp/lock.txt
RUN --mount=type=secret,id=ca_bundle --mount=type=bind,source=docker/wheels,target=/tmp/wheels \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi \
 && uv pip install ${PYPI_INDEX_URL:+--index-url "$PYPI_INDEX_URL"} --find-links /tmp/wheels \
        --require-hashes --no-deps --only-binary :all: -r /tmp/lock.txt \
 && uv pip check \
 && echo "${LOCK}.txt:sha256:$(sha256sum /tmp/lock.txt | cut -c1-16)" > /opt/venv/rcea-lockfile.txt \
 && rm /tmp/lock.txt
# The optional Weights & Biases extra (train.report_to = wandb): `WITH_WANDB=1 invoke build --role train`.
# lockfiles/train-wandb.txt keeps every package it shares with train.txt at train.txt's version.
ARG WITH_WANDB=0
COPY lockfiles/train-wandb.txt /tmp/train-wandb.txt
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi \
 && if [ "${WITH_WANDB}" = 1 ]; then \
      uv pip install ${PYPI_INDEX_URL:+--index-url "$PYPI_INDEX_URL"} \
          --require-hashes --no-deps --only-binary :all: -r /tmp/train-wandb.txt && uv pip check \
      && echo "train-wandb.txt:sha256:$(sha256sum /tmp/train-wandb.txt | cut -c1-16)" >> /opt/venv/rcea-lockfile.txt; \
    fi \
 && rm /tmp/train-wandb.txt

# A numeric non-root user (the host's UID/GID, so bind mounts and named volumes stay writable).
RUN if [ "${APP_UID}" = 0 ]; then echo "APP_UID must not be 0 (root)" >&2; exit 1; fi \
 && (getent group "${APP_GID}" || groupadd --gid "${APP_GID}" rcea) \
 && useradd --non-unique --uid "${APP_UID}" --gid "${APP_GID}" --home-dir /home/rcea --create-home rcea \
 && mkdir -p /workspace/data /cache/hf /cache/vllm \
 && chown -R "${APP_UID}:${APP_GID}" /workspace /cache

# The commit the code below comes from (`invoke build` passes it; manifests read it, rcea/provenance.py).
ARG RCEA_GIT_COMMIT=unknown
ENV RCEA_GIT_COMMIT=${RCEA_GIT_COMMIT}
WORKDIR /workspace
COPY rcea /workspace/rcea
COPY mathdata /workspace/mathdata
COPY train /workspace/train
# The Ray cluster's nodes run this image: its tasks unpickle work units (orchestrate.units) and run them
COPY orchestrate /workspace/orchestrate
COPY configs /workspace/configs
USER ${APP_UID}:${APP_GID}
# Training does not serve anything, so there is nothing for a health check to probe.
HEALTHCHECK NONE
CMD ["python", "-m", "train", "--help"]
