"""infer.gpu_check: its CPU-possible parts at the tiny shape, and what it needs to run at all."""

import ast
from pathlib import Path

import numpy as np

from infer import gpu_check
from infer.backends import Scored

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_run_passes_and_says_why_vllm_is_skipped(capsys):
    assert gpu_check.main(["--cpu"]) == 0
    out = capsys.readouterr().out
    assert "PASS score-tiny: bf16 vs fp32" in out
    assert "PASS entropy:" in out
    assert "SKIP vllm: vLLM generation needs a CUDA GPU" in out
    assert "GPU CHECK PASSED" in out


def test_score_difference_is_the_mean_absolute_difference():
    a = [Scored(np.array([-1.0, -2.0]), np.array([1.0, 2.0])), Scored(np.array([-3.0]), np.array([0.5]))]
    b = [Scored(np.array([-1.1, -2.0]), np.array([1.0, 2.3])), Scored(np.array([-2.7]), np.array([0.5]))]
    d = gpu_check.score_difference(a, b)
    assert np.isclose(d["logprob_mad"], (0.1 + 0 + 0.3) / 3) and np.isclose(d["entropy_mad"], 0.3 / 3)


def test_it_needs_neither_pytest_nor_the_tests_folder():
    """It runs inside the infer image (no pytest, no tests/) and on a bare GPU host."""
    for path in ("infer/gpu_check.py", "rcea/device_check.py", "train/gpu_check.py"):
        tree = ast.parse((ROOT / path).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | names
        assert not any(m and (m.startswith("pytest") or m.startswith("tests")) for m in mods), path
        assert "pytest" not in (ROOT / path).read_text().replace("no pytest", ""), path
