# syntax=docker/dockerfile:1.7
# Inference image: CUDA 13.0, Python 3.11, lockfiles/infer.txt (torch 2.11.0+cu130, vLLM 0.23.0,
# Transformers 5.12.1, PEFT 0.19.1, NumPy 2.3.5, scikit-learn 1.9.0), the rcea and infer packages.
# Build: invoke build --role infer   (docker compose build infer-cli; UID/GID come from .env)
# Pin the bases by digest (`@sha256:...`) at the first real build; the digest cannot be looked up offline.
# devel, not runtime: vLLM 0.23's flashinfer/tilelang kernels JIT-compile with nvcc. CUDA 13 needs a host
# driver >= 580 (or cuda-compat, which CUDA 13 images carry); `invoke doctor` checks it.
ARG CUDA_IMAGE=nvidia/cuda:13.0.3-devel-ubuntu22.04
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
COPY lockfiles/infer.txt /tmp/infer.txt
RUN uv pip install --require-hashes --no-deps --only-binary :all: -r /tmp/infer.txt \
 && uv pip check \
 && echo "infer.txt:sha256:$(sha256sum /tmp/infer.txt | cut -c1-16)" > /opt/venv/rcea-lockfile.txt \
 && rm /tmp/infer.txt

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
COPY infer /workspace/infer
COPY benchmarks /workspace/benchmarks
# infer.gpu_check measures the chunked entropy with benchmarks.infer.entropy_bench
COPY benchmarks /workspace/benchmarks
COPY configs /workspace/configs
USER ${APP_UID}:${APP_GID}
# Only the judge service serves (vLLM's OpenAI API on :8000); its health check lives in compose.yaml so
# that the workers and infer-cli, which run the same image but serve nothing, are not marked unhealthy.
HEALTHCHECK NONE
CMD ["python", "-m", "infer", "--help"]
