"""Nothing the project runs, tests, builds or documents points outside the repository.

The reference material used to build the harness is not part of it: a user's clone has no folder of it
beside the checkout, so every tracked file must do without it and cite only documents of the repository.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The reference folder's name is assembled, so that this file does not name it either.
REF = "shar" + "ed"
OUTSIDE = "../" + REF
FORBIDDEN = re.compile(rf"{re.escape(OUTSIDE)}|RCEA_{REF.upper()}|{REF}/spec|decisions\.md|diagnostics\.md"
                       r"|\bOracles? \d|A1-A16")
ALLOWED = {"tests/deploy/test_self_contained.py"}  # this file names the patterns


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def test_no_file_reads_or_cites_anything_outside_the_repository():
    hits = []
    for rel in tracked_text_files():
        if rel in ALLOWED:
            continue
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (figures): no paths in them
        hits += [f"{rel}:{n}: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), 1)
                 if FORBIDDEN.search(line)]
    assert not hits, "references outside the repository:\n" + "\n".join(hits)


def test_the_check_sees_a_forbidden_reference():
    assert FORBIDDEN.search(f"see {OUTSIDE}/spec/decisions.md") and FORBIDDEN.search(f"RCEA_{REF.upper()}=/x")
    assert FORBIDDEN.search("reproduces Oracle 3") and FORBIDDEN.search("ambiguities A1-A16")
    assert not FORBIDDEN.search("docs/estimators.md#semantic-modes; the shared volume")


def test_documents_cite_only_files_that_exist():
    """Every relative Markdown link of README.md and docs/ names a file of the repository."""
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target and not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not missing, missing
