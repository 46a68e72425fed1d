"""The quick demo, run once per session: the demo test checks it, the Compose rehearsal reuses its models."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("grpo", "kl_cov")


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """(data folder, first run's stdout, second run's stdout) of `scripts/run demo --quick` in a fresh folder."""
    data = tmp_path_factory.mktemp("demo") / "data"
    env = dict(os.environ, RCEA_DATA=str(data), RCEA_RESULTS=str(data.parent / "results"))
    env.pop("RCEA_OVERRIDES", None)
    cmd = [str(ROOT / "scripts" / "run"), "demo", "--quick", "--methods", ",".join(METHODS)]
    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    return data, first.stdout, second.stdout
