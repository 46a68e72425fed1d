"""Session set-up shared by every test area.

* Hermetic environment: the caller's project variables (`RCEA_DATA`, `RCEA_OVERRIDES`, `NUM_WORKERS`, ...)
  are removed before any test module is imported, so the suite gives the same result whatever the shell
  exports; tests that need one set it themselves (monkeypatch, or a subprocess env). Kept: variables that
  steer the test run rather than the code under test (see KEEP).
* Test tiers: CPU by default; `@pytest.mark.gpu` tests run only where CUDA is available.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# pytest puts this folder (tests/, no __init__.py) on sys.path, where the folder tests/vllm passes for the vllm
# package wherever vLLM is not installed (a namespace package): find_spec("vllm") then finds it, and TRL, reading
# vLLM as installed, fails on its version at `import trl.trainer.grpo_trainer` (every training test in
# .envs/train). The tests import each other as tests.<area>.<module>, from the project root.
_TESTS = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _TESTS]

KEEP = frozenset({
    "RCEA_ROLE",         # set by scripts/test: the environment a test area runs in
    "RCEA_DEMO_DATA",    # set by tests/e2e for the nested on-demo session
    "RCEA_TEST_OUTPUT",  # where screenshots of the annotation-page test go
    "RCEA_OFFLINE",      # skip the one test that needs PyPI
    "RCEA_FIND_LINKS",   # the CPU torch wheel folder, set-up configuration like pip's own
    "RCEA_NO_APT",       # scripts/test: do not apt-get chromium
    "RCEA_TEST_JOBS",    # scripts/test: test areas run at a time
    "RCEA_NO_ENGINE",    # scripts/test: no Docker engine on this host (the container tests and the rehearsal skip)
    "RCEA_ENGINE_READY", # scripts/test: it set the engine and the CPU images up (the container tests must not skip)
    "RCEA_ENGINE_LOCK",  # scripts/engine and `invoke build`: the host's lock file
    "RCEA_CA_BUNDLE",    # image builds behind a proxy (set-up configuration, like RCEA_FIND_LINKS)
    "RCEA_INDEX_URL",    # image builds from a PyPI mirror
})


def project_variables(environ) -> list[str]:
    """Names in `environ` that would change what the code under test does."""
    return sorted(k for k in environ if (k.startswith("RCEA_") and k not in KEEP) or k == "NUM_WORKERS")


def pytest_configure(config):
    for name in project_variables(os.environ):
        del os.environ[name]


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if gpu_items and not _cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run infer/gpu_check.py on a GPU host)")
        for item in gpu_items:
            item.add_marker(skip)
