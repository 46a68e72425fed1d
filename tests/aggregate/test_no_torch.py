"""The aggregation role never imports torch, and --help stays light."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import aggregate

ROOT = Path(aggregate.__file__).resolve().parent


def test_no_module_imports_torch() -> None:
    names = [f"aggregate.{m.name}" for m in pkgutil.iter_modules([str(ROOT)])]
    assert len(names) >= 10
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({n!r})\n" for n in names) + \
        "import matplotlib.pyplot\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT.parent)
    assert out.stdout.strip() == "False"


def test_source_has_no_torch_import() -> None:
    pat = re.compile(r"^\s*(import\s+torch|from\s+torch)\b", re.M)
    offenders = [p.name for p in ROOT.rglob("*.py") if pat.search(p.read_text())]
    assert offenders == []


def test_help_does_not_import_heavy_modules() -> None:
    code = "import sys; import aggregate.cli as c\ntry:\n    c.main(['--help'])\nexcept SystemExit: pass\n" \
           "print(sorted(m for m in ('numpy','pandas','pyarrow','matplotlib','scipy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT.parent)
    assert out.stdout.strip().splitlines()[-1] == "[]"
