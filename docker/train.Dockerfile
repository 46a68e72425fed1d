# syntax=docker/dockerfile:1.7
# Training image: CUDA 12.8 runtime, Python 3.11, lockfiles/train.txt (torch 2.8.0+cu128, vLLM 0.11.0,
# TRL 0.29.0, Transformers 4.57.6, PEFT 0.18.1, Datasets 4.6.1, bitsandbytes), the rcea and train packages.
# Build: invoke build --role train   (docker compose build train; UID/GID come from .env)
# Pin the bases by digest (`@sha256:...`) at the first real build; the digest cannot be looked up offline.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.9

FROM ${UV_IMAGE} AS uv

FROM ${CUDA_IMAGE}
ARG APP_UID=1000
ARG APP_GID=1000
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV UV_PYTHON_INSTALL_DIR=/opt/python UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_NO_CACHE=1 \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/workspace HF_HOME=/cache/hf RCEA_DATA=/workspace/data \
    HOME=/home/rcea USER=rcea PYTHONUNBUFFERED=1
COPY --from=uv /uv /usr/local/bin/uv

# A C toolchain: Triton (pinned with torch) builds a small launcher module with the system C compiler the
# first time a kernel runs, and vLLM compiles kernels when its engine starts; the CUDA base images do not
# promise one. Ubuntu 22.04's build-essential (gcc 11, make, libc headers), version pinned.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential=12.9ubuntu3 \
 && rm -rf /var/lib/apt/lists/*

# Python 3.11 (Ubuntu 22.04 ships 3.10; uv fetches the pinned uv's python-build-standalone 3.11) and the
# locked environment: hashes required, no resolution, wheels only. uv brings its own TLS roots.
RUN uv python install 3.11 && uv venv --python 3.11 /opt/venv
COPY lockfiles/train.txt /tmp/train.txt
RUN uv pip install --require-hashes --no-deps --only-binary :all: -r /tmp/train.txt \
 && uv pip check \
 && echo "train.txt:sha256:$(sha256sum /tmp/train.txt | cut -c1-16)" > /opt/venv/rcea-lockfile.txt \
 && rm /tmp/train.txt
# The optional Weights & Biases extra (train.report_to = wandb): `WITH_WANDB=1 invoke build --role train`.
# lockfiles/train-wandb.txt keeps every package it shares with train.txt at train.txt's version.
ARG WITH_WANDB=0
COPY lockfiles/train-wandb.txt /tmp/train-wandb.txt
RUN if [ "${WITH_WANDB}" = 1 ]; then \
      uv pip install --require-hashes --no-deps --only-binary :all: -r /tmp/train-wandb.txt && uv pip check \
      && echo "train-wandb.txt:sha256:$(sha256sum /tmp/train-wandb.txt | cut -c1-16)" >> /opt/venv/rcea-lockfile.txt; \
    fi \
 && rm /tmp/train-wandb.txt

# A numeric non-root user (the host's UID/GID, so bind mounts and named volumes stay writable).
RUN if [ "${APP_UID}" = 0 ]; then echo "APP_UID must not be 0 (root)" >&2; exit 1; fi \
 && (getent group "${APP_GID}" || groupadd --gid "${APP_GID}" rcea) \
 && useradd --non-unique --uid "${APP_UID}" --gid "${APP_GID}" --home-dir /home/rcea --create-home rcea \
 && mkdir -p /workspace/data /cache/hf \
 && chown -R "${APP_UID}:${APP_GID}" /workspace /cache

# The commit the code below comes from (`invoke build` passes it; manifests read it, rcea/provenance.py).
ARG RCEA_GIT_COMMIT=unknown
ENV RCEA_GIT_COMMIT=${RCEA_GIT_COMMIT}
WORKDIR /workspace
COPY rcea /workspace/rcea
COPY mathdata /workspace/mathdata
COPY train /workspace/train
COPY configs /workspace/configs
USER ${APP_UID}:${APP_GID}
# Training does not serve anything, so there is nothing for a health check to probe.
HEALTHCHECK NONE
CMD ["python", "-m", "train", "--help"]
