"""Where things live, all relative to the project root (no machine paths in the repo)."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The repository root: the folder holding `rcea/`."""
    return Path(__file__).resolve().parent.parent


def mathdata_dir() -> Path:
    """The benchmark and offline training files shipped with the project (`mathdata/`, see its PROVENANCE.md)."""
    return project_root() / "mathdata"


def data_dir() -> Path:
    """The artifact store: `RCEA_DATA`, else `./data` (in a container: the host's, mounted at /workspace/data)."""
    env = os.environ.get("RCEA_DATA")
    return Path(env).resolve() if env else project_root() / "data"


def configs_dir() -> Path:
    return project_root() / "configs"
