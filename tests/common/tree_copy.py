"""A copy of the project's tree for the one-file-to-add tests (issue 39): the files git tracks or would track
(untracked ones that are not ignored), without the environments, the data or any build output, so a test adds
exactly the files it names and runs the copy's own code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rcea.paths import project_root


def copy_tree(dest: Path) -> Path:
    """`dest` holding the project's files (tracked, and untracked ones git does not ignore); returns `dest`."""
    root = project_root()
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = root / name
        if src.is_file():          # a file deleted or moved in the working tree is still in git's index
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def run_in(tree: Path, code: str, data: Path, timeout: int = 120, python: str | None = None, **env):
    """`code` run by this interpreter (or `python`) in `tree`, with `data` as the data folder: the copy's modules,
    never this checkout's."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", str(tree)),
            "RCEA_DATA": str(data), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", **env}
    return subprocess.run([python or sys.executable, "-c", code], cwd=tree, capture_output=True, text=True,
                          timeout=timeout, env=full)
