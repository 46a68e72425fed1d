"""rcea.layout is the one place artifact paths are spelled; the roles and the task runner use it."""

from __future__ import annotations

import ast
from pathlib import Path

from rcea import layout
from rcea.paths import project_root


def test_paths_under_the_data_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    assert layout.prepared_pool("3b") == tmp_path / "prepared/3b/train.jsonl"
    assert layout.checkpoints_dir("7b", "kl_cov") == tmp_path / "train/7b/kl_cov/checkpoints"
    assert layout.state_path("tiny") == tmp_path / "state/tiny.sqlite"
    assert layout.table_part("3b", "samples", "probe-grpo-50") == tmp_path / "infer/3b/tables/samples/probe-grpo-50.parquet"
    assert layout.audit_db("3b") == tmp_path / "infer/3b/semantic/audit/audit.sqlite"
    assert layout.llm_cache_dir("judge") == tmp_path / "llm_cache/judge"
    assert layout.results_dir("7b") == tmp_path / "results/7b"
    assert layout.seeds_dir("tiny", "grpo") == tmp_path / "seeds/tiny/grpo"
    # A command line for a container names the volume's folder instead: the same layout under it.
    assert str(layout.tables_dir("3b", root="data")) == "data/infer/3b/tables"


# The store's top folders (and a run's checkpoints folder): a path joined onto one of these names, or a string
# starting with one, is a store path spelled by hand.
STORE_NAMES = ("models", "prepared", "train", "seeds", "infer", "llm_cache", "results", "logs", "checkpoints")


def _hand_built_paths(path: Path) -> list[int]:
    """Lines spelling a folder of the store outside rcea.layout: `data_dir() / "<literal>"`, `x / "<store
    name>"`, or an f-string starting with `<store name>/{...}`."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant):
            by_data_dir = (isinstance(node.left, ast.Call)
                           and getattr(node.left.func, "id", getattr(node.left.func, "attr", "")) == "data_dir")
            if by_data_dir or node.right.value in STORE_NAMES:
                hits.append(node.lineno)
        if (isinstance(node, ast.JoinedStr) and len(node.values) > 1 and isinstance(node.values[0], ast.Constant)
                and node.values[0].value in {f"{n}/" for n in STORE_NAMES}
                and isinstance(node.values[1], ast.FormattedValue)):
            hits.append(node.lineno)
    return hits


def test_no_role_spells_a_store_path_itself():
    root = project_root()
    offenders = {}
    for folder in ("rcea", "orchestrate", "train", "infer", "aggregate", "benchmarks", "scripts"):
        for path in (root / folder).rglob("*.py"):
            if path.name == "layout.py" and path.parent.name == "rcea":
                continue
            lines = _hand_built_paths(path)
            if lines:
                offenders[str(path.relative_to(root))] = lines
    for path in (root / "tasks.py",):
        if _hand_built_paths(path):
            offenders["tasks.py"] = _hand_built_paths(path)
    assert not offenders, f"use rcea.layout for these store paths: {offenders}"


def test_the_guard_sees_a_hand_built_path(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('from rcea.paths import data_dir\nq = data_dir() / "infer" / "3b" / "queue.sqlite"\n'
                   'r = Path(root) / "train" / scale / method\n'
                   'a = f"train/{scale}/{method}/checkpoints/checkpoint-{step}"\n'
                   'c = out / "checkpoints"\n')
    assert sorted(set(_hand_built_paths(bad))) == [2, 3, 4, 5]
