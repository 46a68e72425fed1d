"""rcea.publish: a target that cannot be written ends in one line, leaves no `.incoming`, keeps the old copy."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from rcea import publish as pub


def make(tmp_path: Path) -> tuple[Path, Path]:
    src, dest = tmp_path / "data" / "tiny", tmp_path / "results" / "tiny"
    (src / "figures").mkdir(parents=True)
    (src / "report.md").write_text("new report\n")
    (src / "figures" / "a.png").write_bytes(b"png")
    dest.mkdir(parents=True)
    (dest / "report.md").write_text("old report\n")
    return src, dest


def leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir() if p.name != dest.name)


def test_publish_replaces_the_copy(tmp_path, capsys):
    src, dest = make(tmp_path)
    assert pub.main([str(src), str(dest)]) == 0
    assert (dest / "report.md").read_text() == "new report\n" and (dest / "figures" / "a.png").exists()
    assert leftovers(dest) == [] and capsys.readouterr().out.startswith("[results] 2 files")


@pytest.mark.parametrize("where", ["rename", "copy"])
def test_unwritable_target_one_line_nothing_left(tmp_path, capsys, monkeypatch, where):
    """Refused renaming the published folder (a read-only folder where the platform asks write permission to
    rename it) or refused writing a file mid-copy: one line, no `tiny.incoming`, the old copy in place."""
    src, dest = make(tmp_path)
    if where == "rename":
        real = Path.rename

        def rename(self, target):
            if self == dest:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, target)
        monkeypatch.setattr(Path, "rename", rename)
    else:
        real_copy, n = shutil.copyfile, []

        def copyfile(s, d, **kw):
            n.append(s)
            if len(n) > 1:
                raise PermissionError(13, "Permission denied", str(d))
            return real_copy(s, d, **kw)
        monkeypatch.setattr(shutil, "copyfile", copyfile)
    assert pub.main([str(src), str(dest)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Permission denied" in err and "chmod -R u+w" in err, err
    assert "Traceback" not in err and str(src) in err
    assert leftovers(dest) == [] and (dest / "report.md").read_text() == "old report\n"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_results_folder(tmp_path, capsys):
    src, dest = make(tmp_path)
    mode = dest.parent.stat().st_mode
    dest.parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert pub.main([str(src), str(dest)]) == 2
    finally:
        dest.parent.chmod(mode)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "chmod" in err
    assert leftovers(dest) == [] and (dest / "report.md").read_text() == "old report\n"


def test_a_read_only_folder_inside_the_copy_is_refused_before_anything_changes(tmp_path, capsys, monkeypatch):
    """`chmod a-w results/tiny/figures` (seen through os.access, which root passes): refused up front, one line."""
    src, dest = make(tmp_path)
    (dest / "figures").mkdir()
    real = os.access
    monkeypatch.setattr(pub.os, "access", lambda p, mode: Path(p) != dest / "figures" and real(p, mode))
    assert pub.main([str(src), str(dest)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"Permission denied: {dest / 'figures'}" in err, err
    assert leftovers(dest) == [] and (dest / "report.md").read_text() == "old report\n"


def test_a_full_disk_names_the_space(tmp_path, capsys, monkeypatch):
    src, dest = make(tmp_path)

    def full(s, d, **kw):
        raise OSError(28, "No space left on device", str(d))
    monkeypatch.setattr(shutil, "copyfile", full)
    assert pub.main([str(src), str(dest)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "No space left" in err and "free space" in err, err
    assert leftovers(dest) == [] and (dest / "report.md").read_text() == "old report\n"
