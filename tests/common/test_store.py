import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from rcea.store import atomic_write_text, is_complete, manifest_path, read_table, run_step, write_parquet


def test_atomic_write_leaves_old_content_when_writer_fails(tmp_path):
    target = tmp_path / "x.txt"
    atomic_write_text(target, "old")

    def boom(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed")

    from rcea.store import atomic_write
    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]  # no temporary left behind


def test_killed_process_leaves_no_complete_artifact(tmp_path):
    """A writer killed mid-step (SIGKILL) leaves nothing that counts as complete."""
    target = tmp_path / "out.txt"
    code = (
        "import os, time, sys\n"
        "from rcea.store import run_step\n"
        "def produce(tmp):\n"
        "    tmp.write_text('partial'); print('writing', flush=True); time.sleep(30)\n"
        f"run_step({str(target)!r}, produce)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.kill()
    proc.wait()
    assert not target.exists() and not is_complete(target)
    calls = []
    assert run_step(target, lambda tmp: (calls.append(1), tmp.write_text("done")))
    assert target.read_text() == "done" and is_complete(target)


def test_skip_if_complete(tmp_path):
    target = tmp_path / "a.txt"
    calls = []

    def produce(tmp):
        calls.append(1)
        tmp.write_text("v")

    assert run_step(target, produce) is True
    assert run_step(target, produce) is False
    assert calls == [1]
    manifest = json.loads(manifest_path(target).read_text())
    for key in ("git_commit", "lockfile", "libraries", "device", "seeds"):
        assert key in manifest
    os.remove(manifest_path(target))  # artifact without manifest = incomplete: redone
    assert run_step(target, produce) is True and calls == [1, 1]


def test_parquet_parts_and_manifests(tmp_path):
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    write_parquet(df, tmp_path / "t" / "p0.parquet", seeds={"s": 1})
    write_parquet(df.assign(a=[3, 4]), tmp_path / "t" / "p1.parquet")
    (tmp_path / "t" / "stray.parquet").write_bytes(b"not complete")  # no manifest: ignored
    out = read_table(tmp_path / "t")
    assert sorted(out["a"]) == [1, 2, 3, 4]
    assert json.loads(manifest_path(tmp_path / "t" / "p0.parquet").read_text())["rows"] == 2
    with pytest.raises(FileNotFoundError, match="no table"):
        read_table(tmp_path / "missing")


@pytest.fixture
def umask():
    """Set the process umask for one test, restoring the caller's afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_artifacts_get_the_mode_the_callers_umask_allows(tmp_path, umask, mask, mode):
    """mkstemp alone makes 0600 files; every atomic artifact must read like a plain open() under the umask."""
    from rcea.store import current_umask
    umask(mask)
    assert current_umask() == mask
    df = pd.DataFrame({"a": [1, 2]})
    written = [atomic_write_text(tmp_path / "report.md", "# r\n"),
               write_parquet(df, tmp_path / "tables" / "samples" / "part-0.parquet"),
               manifest_path(tmp_path / "tables" / "samples" / "part-0.parquet")]
    run_step(tmp_path / "step.txt", lambda tmp: tmp.write_text("done"))
    written += [tmp_path / "step.txt", manifest_path(tmp_path / "step.txt")]
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in written} == {p.name: oct(mode) for p in written}


def test_a_folder_produced_by_a_step_gets_the_folder_mode(tmp_path, umask):
    umask(0o022)

    def produce(tmp):
        tmp.unlink()
        tmp.mkdir(mode=0o700)  # as a writer that stages a private folder would
        (tmp / "inner.txt").write_text("x")
    run_step(tmp_path / "bundle", produce)
    assert oct((tmp_path / "bundle").stat().st_mode & 0o777) == oct(0o755)
