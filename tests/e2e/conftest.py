"""The quick demo, run once per session: the demo test checks it; the Ray engine's study and the Compose
rehearsal start together from it as soon as it is done (`studies`), while the demo's own checks run."""
from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.studies import METHODS, ray_study, rehearsal_study, resumed_study

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """(data folder, first run's stdout, second run's stdout) of `scripts/run demo --quick` in a fresh folder."""
    data = tmp_path_factory.mktemp("demo") / "data"
    env = dict(os.environ, RCEA_DATA=str(data), RCEA_RESULTS=str(data.parent / "results"))
    env.pop("RCEA_OVERRIDES", None)
    cmd = [str(ROOT / "scripts" / "run"), "demo", "--quick", "--methods", ",".join(METHODS)]
    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=2400)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    (data.parent / "first-run.stderr").write_text(first.stderr)   # test_demo.py checks the terminal's noise
    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    return data, first.stdout, second.stdout


@pytest.fixture(scope="session", autouse=True)
def studies(request, tmp_path_factory):
    """{"ray": future, "rehearsal": future, "resume": future} of the studies that only read the demo's folder (tests/e2e/studies.py),
    each started in a thread right after the demo, for the tests selected in this session. Side by side they
    overlap each other and the demo's own checks (mostly single-threaded subprocesses) on the two cores."""
    selected = {item.path.name for item in request.session.items}
    wanted = [name for name, module in (("ray", "test_demo_ray.py"), ("rehearsal", "test_rehearsal.py"),
                                        ("resume", "test_resume.py")) if module in selected]
    if not wanted:
        yield {}
        return
    data = request.getfixturevalue("demo")[0]
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:  # leaving it waits for both
        start = {"ray": lambda: pool.submit(ray_study, data, tmp_path_factory.mktemp("ray")),
                 "rehearsal": lambda: pool.submit(rehearsal_study, data / "models", tmp_path_factory.mktemp("rehearsal")),
                 "resume": lambda: pool.submit(resumed_study, data, tmp_path_factory.mktemp("resume"))}
        yield {name: start[name]() for name in wanted}
