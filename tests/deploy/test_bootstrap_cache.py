"""scripts/bootstrap's bytecode cache: an environment built with the same distributions as an earlier one
(another checkout, CI's clean copy) gets the earlier one's compiled files by hard links instead of compiling
again, Python accepts them, and a copy whose sources changed is compiled, not trusted."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path("aggregate/lib/python3.11/site-packages")


def _bootstrap(envs: Path, cache: Path) -> str:
    envs.mkdir(parents=True, exist_ok=True)
    if not (envs / "tools").exists():   # the checkout's own tools environment (uv), not rebuilt here
        (envs / "tools").symlink_to(ROOT / ".envs" / "tools")
    r = subprocess.run([str(ROOT / "scripts" / "bootstrap"), "aggregate"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "RCEA_ENVS": str(envs), "RCEA_BYTECODE_CACHE": str(cache)}, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _used_pyc(python: Path) -> str:
    """What the import system says of pandas/__init__ with writing off (-v names the file a code object came from)."""
    r = subprocess.run([str(python), "-v", "-c", "import pandas"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    return "\n".join(line for line in r.stderr.splitlines() if "/pandas/__init__" in line or "/pandas/__pycache__/__init__" in line)


def test_a_second_environment_links_the_first_ones_bytecode_and_python_uses_it(tmp_path):
    if not (ROOT / ".envs" / "tools" / "bin" / "uv").exists():
        pytest.skip("needs the tools environment (scripts/bootstrap tools)")
    cache = tmp_path / "cache"
    first = _bootstrap(tmp_path / "a", cache)
    assert "byte-compiling" in first and "linked from" not in first
    second = _bootstrap(tmp_path / "b", cache)
    assert "linked from" in second and "byte-compiling" not in second
    pyc = next((tmp_path / "b" / SITE / "pandas" / "__pycache__").glob("__init__.*.pyc"))
    twin = tmp_path / "a" / SITE / "pandas" / "__pycache__" / pyc.name
    assert pyc.stat().st_ino == twin.stat().st_ino          # one file, linked, not compiled again
    used = _used_pyc(tmp_path / "b" / "aggregate" / "bin" / "python")
    assert f"code object from '{pyc}'" in used and "bytecode is stale" not in used

    # A third environment whose sources are copies (new modification times, as when uv cannot link from its
    # cache): the cached files do not match them, so it is compiled, and Python takes its own files
    third = tmp_path / "c"
    third.mkdir()
    (third / "tools").symlink_to(ROOT / ".envs" / "tools")
    subprocess.run(["cp", "-r", str(tmp_path / "b" / "aggregate"), str(third / "aggregate")], check=True)
    for p in (third / SITE).rglob("*.py"):
        p.touch()
    (third / "aggregate" / ".bytecode").unlink()
    again = _bootstrap(third, cache)
    assert "byte-compiling" in again
    used = _used_pyc(third / "aggregate" / "bin" / "python")
    assert "code object from" in used and "bytecode is stale" not in used
