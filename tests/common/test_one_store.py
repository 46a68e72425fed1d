"""Issue 39: one module opens SQLite. The state store (rcea/state.py: the queue's jobs and the unit records) is
the only project module that imports sqlite3, beside the audit's own annotation store (infer/audit/store.py);
every other module goes through rcea.state (the queue's operations run their SQL through its transactions)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from rcea.paths import project_root

ALLOWED = {"rcea/state.py", "infer/audit/store.py"}
SKIP = {"tests", "data", "results", "__pycache__", "node_modules"}   # tests, artifacts; hidden folders too


def sqlite_importers(root: Path) -> set[str]:
    """The .py files under `root` (not tests/, hidden folders such as .envs/ and .git/, or the data folders)
    that import sqlite3 (or its C module), as paths relative to `root`."""
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (Path(folder) == root and d in SKIP)
                   and d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                continue
            path = Path(folder) / name
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                if any(n.split(".")[0] in ("sqlite3", "_sqlite3") for n in names):
                    found.add(path.relative_to(root).as_posix())
    return found


def test_only_the_state_store_and_the_audit_store_import_sqlite3():
    assert sqlite_importers(project_root()) == ALLOWED


def test_the_walk_finds_every_form_of_the_import(tmp_path):
    """The check itself: each way of importing sqlite3 is found, a mention in text or a test is not."""
    forms = {"a.py": "import sqlite3\n", "b/c.py": "def f():\n    from sqlite3 import connect\n",
             "d.py": "import os, sqlite3 as db\n", "e.py": "import _sqlite3\n"}
    quiet = {"f.py": "# import sqlite3\nx = 'sqlite3'\n", "tests/t.py": "import sqlite3\n",
             ".envs/x/lib.py": "import sqlite3\n", "g.py": "from .sqlite3 import x\n"}
    for rel, text in {**forms, **quiet}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert sqlite_importers(tmp_path) == set(forms)
