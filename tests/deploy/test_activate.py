"""Issue 40 item 3: `source scripts/activate` builds the environments the tasks run (what `scripts/run` builds),
never the test-only ones (vLLM on CPU, about 5 GB, and the contract twins: scripts/test builds those).

The real script is sourced from a copy of the project's scripts/ beside a stub `bootstrap` that records its
arguments and makes the tools environment's `activate`, so nothing is built here."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY = ("vllm-cpu", "contract", "contract-infer", "contract-train")


def _run_roles() -> list[str]:
    """The roles `scripts/run` bootstraps (its one bootstrap line)."""
    line = [ln for ln in (ROOT / "scripts" / "run").read_text().splitlines() if "scripts/bootstrap" in ln
            and not ln.lstrip().startswith("#")]
    assert len(line) == 1, line
    args = line[0].split("scripts/bootstrap\"", 1)[1].split(">", 1)[0].split()
    return [a for a in args if not a.startswith("-")]


def test_activate_builds_the_task_environments_only(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "activate", tmp_path / "scripts" / "activate")
    stub = tmp_path / "scripts" / "bootstrap"
    stub.write_text('#!/usr/bin/env bash\nroot="$(cd "$(dirname "$0")/.." && pwd)"\necho "$@" > "$root/args"\n'
                    'mkdir -p "$root/.envs/tools/bin"\necho \'export RCEA_STUB_ACTIVE=1\' > "$root/.envs/tools/bin/activate"\n')
    stub.chmod(0o755)
    r = subprocess.run(["bash", "-c", 'source scripts/activate && echo "active=$RCEA_STUB_ACTIVE"'], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "active=1", r.stderr
    args = (tmp_path / "args").read_text().split()
    roles = [a for a in args if not a.startswith("-")]
    assert roles == _run_roles() == ["tools", "train", "infer", "aggregate"]   # what the tasks run, as scripts/run
    assert not set(roles) & set(TEST_ONLY) and roles   # no role given would mean every environment
    assert "-q" in args   # silent about environments that are current, as scripts/run


def test_a_failed_bootstrap_leaves_the_shell_as_it_was(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "activate", tmp_path / "scripts" / "activate")
    (tmp_path / "scripts" / "bootstrap").write_text("#!/usr/bin/env bash\nexit 2\n")
    (tmp_path / "scripts" / "bootstrap").chmod(0o755)
    r = subprocess.run(["bash", "-c", "source scripts/activate; echo \"venv=${VIRTUAL_ENV:-none}\""], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert r.stdout.strip() == "venv=none" and "scripts/bootstrap failed" in r.stderr
