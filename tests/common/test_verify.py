"""Tests of the verifier (rcea.verify): extraction, normalisations, agreement with hand labels,
batch CLI, time limits. Runs in both .envs/infer and .envs/train (training uses `reward`)."""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rcea import verify_sandbox
from rcea.verify import VerifyResult, extract_boxed, reward, verify
from rcea.verify_agreement import CASES_PATH, UNBOXED_CATEGORIES, evaluate, load_cases, ours
from rcea.verify_agreement import main as agreement_main
from rcea.verify_normalize import normalize_answer

ROOT = Path(__file__).resolve().parents[2]
PATHOLOGICAL = "After simplification, $\\boxed{9^{9^{9^{9^{9^{9}}}}}}$."


@pytest.fixture(scope="module", autouse=True)
def _worker():
    verify_sandbox.warmup(2)  # start-up is not part of a call's time limit; 2 for the thread test
    yield


def box(ans: str) -> str:
    """A realistic completion ending in a boxed answer."""
    return f"Step 1: set up the equation.\nStep 2: solve it.\n\nTherefore, the final answer is $\\boxed{{{ans}}}$."


# ------------------------------------------------------------------ extraction

@pytest.mark.parametrize("text, expected", [
    ("a \\boxed{1} then \\boxed{2}.", "2"),
    ("$\\boxed{\\frac{1}{\\sqrt{2}}}$", "\\frac{1}{\\sqrt{2}}"),
    ("so \\fbox{7} it is", "7"),
    ("the answer is $\\boxed 42$.", "42"),
    ("the answer is \\boxed 113", "113"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("\\boxed{}", ""),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text", [
    "The answer is 5.", "\\boxed{5", "\\boxed{3} and then \\boxed{\\frac{1}{", "$\\boxed$ 17", "", "\\boxedx{3}",
    "\\boxed{{1,2}",
])
def test_extract_boxed_none(text):
    assert extract_boxed(text) is None


def test_extract_boxed_never_crashes_on_odd_text():
    for text in ["\\boxed", "\\boxed ", "\\boxed{\\", "}}}{{{\\boxed{}}", "\\fbox{", "\\" * 50, "{" * 10000]:
        extract_boxed(text)  # must not raise


# ------------------------------------------------------------------ equivalences per feature

@pytest.mark.parametrize("ans, ref", [
    ("−3", "-3"), ("½", "\\frac{1}{2}"), ("2½", "\\frac52"), ("π/2", "\\frac{\\pi}{2}"), ("√2", "\\sqrt{2}"),
    ("x²+1", "x^2+1"), ("x ≤ 3", "x \\le 3"), ("2×3", "6"), ("45°", "45"),
    ("1,000", "1000"), ("1,234,567", "1234567"), ("4{,}000", "4000"),
    ("5.", "5"), ("\\frac{1}{2}.", "\\frac{1}{2}"),
    ("30^\\circ", "30"), ("30^{\\circ}", "30"), ("76", "76^\\circ"),
    ("5 \\text{ cm}", "5"), ("5\\mbox{ cm}", "5"), ("12\\mathrm{~cm}^2", "12"), ("5cm", "5"), ("12ft^2", "12"), ("40", "40\\text{ feet}"),
    ("\\dfrac{11}{2}", "\\frac{11}{2}"), ("\\tfrac{13}{4}", "\\frac{13}{4}"),
    ("\\left(2, \\frac{7\\pi}{4}\\right)", "\\left( 2, \\frac{7 \\pi}{4} \\right)"),
    ("25", "025"), ("055", "55"),
    ("50\\%", "50"), ("25", "25\\%"),
    ("x = 5", "5"), ("a+b=7", "7"), ("x = 2 \\text{ or } x = 3", "2,3"),
    ("1.24 \\times 10^{-8}", "1.24e-8"), ("10^{11}", "1e11"),
    ("1+2x", "2x+1"), ("(x+1)^2", "x^2+2x+1"),
    ("\\$1,500", "1500"), ("\\text{(C)}", "C"), ("\\text{Even}", "\\text{even}"),
    ("2\\frac{1}{2}", "\\frac{5}{2}"), ("1, -2", "-2,1"), ("(-\\infty, 3]", "x \\leq 3"),
])
def test_equivalent(ans, ref):
    res = verify(box(ans), ref)
    assert res == VerifyResult(True, ans)


@pytest.mark.parametrize("ans, ref", [
    ("(1,2)", "(2,1)"), ("(1,2)", "12"), ("1,000", "10000"), ("2, 3, 4", "2,3"), ("131", "113"),
    ("080", "8"), ("x = 4", "3"), ("45\\%", "40"), ("0.33", "\\frac13"), ("\\text{odd}", "\\text{even}"),
    ("[1,5]", "[1,5)"), ("\\frac{1}{m}", "\\frac{1}{m} t"), ("2x", "2"), ("-\\infty", "\\infty"), ("2561_8", "2516_8"), ("y=2x", "y=3x"),
])
def test_not_equivalent(ans, ref):
    assert verify(box(ans), ref).correct is False


def test_tuples_and_intervals_keep_their_commas():
    assert normalize_answer("(1,2)") == "(1,2)"
    assert normalize_answer("1,2") == "1,2"
    assert normalize_answer("[1,000, 2]") == "[1,000, 2]"
    assert normalize_answer("-12,345.5") == "-12345.5"


def test_unboxed_answer_is_wrong_and_not_extracted():
    for text in ["The answer is 5.", "**Final Answer:** 5", "Answer: \\[ x = 5 \\]", "$5$"]:
        assert verify(text, "5") == VerifyResult(False, None)
        assert reward(text, "5") == 0.0


def test_last_box_wins():
    text = "First I got $\\boxed{3}$. Wait, that is wrong; the answer is $\\boxed{5}$."
    assert verify(text, "5").correct and not verify(text, "3").correct


def test_api_types():
    res = verify(box("5"), "5")
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.correct = False  # type: ignore[misc]
    assert reward(box("5"), "5") == 1.0 and isinstance(reward(box("5"), "5"), float)
    assert reward(box("6"), "5") == 0.0
    assert reward(None, "5") == 0.0  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        verify(None, "5")  # type: ignore[arg-type]


def test_model_output_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f"\\text{{__import__('os').system('touch {marker}')}}",
        f"eval(\"open('{marker}','w')\")",
    ]
    for p in payloads:
        assert verify(box(p), "5").correct is False
    assert not marker.exists()


# ------------------------------------------------------------------ labelled agreement set

def test_case_file_shape():
    rows = load_cases(CASES_PATH, "all")
    cats = {r["category"] for r in rows}
    assert len(cats) >= 35
    for cat in cats:
        splits = [r["split"] for r in rows if r["category"] == cat]
        assert "dev" in splits and "heldout" in splits, cat
    assert len({r["id"] for r in rows}) == len(rows)
    assert UNBOXED_CATEGORIES <= cats
    assert all(r["label"] is False for r in rows if r["category"] in UNBOXED_CATEGORIES)


def test_normalisation_is_idempotent_on_the_case_answers():
    for r in load_cases(CASES_PATH, "all"):
        for s in (r["reference"], extract_boxed(r["completion"]) or ""):
            once = normalize_answer(s)
            assert normalize_answer(once) == once, s


def test_heldout_agreement_at_least_99_percent_and_no_unboxed_acceptance():
    rep = evaluate("rcea.verify", ours, load_cases(CASES_PATH, "heldout"))
    assert rep.n >= 200
    assert rep.unboxed_accepted == 0
    assert rep.agreement >= 0.99, rep.failures


def test_agreement_cli_exit_status(capsys):
    assert agreement_main(["--split", "dev", "--skip-baseline"]) == 0
    assert "agreement" in capsys.readouterr().out
    assert agreement_main(["--split", "dev", "--skip-baseline", "--min-agreement", "1.01"]) == 1


# ------------------------------------------------------------------ time limits

def test_pathological_input_returns_within_limit():
    t0 = time.monotonic()
    res = verify(PATHOLOGICAL, "5", timeout=1.5)
    elapsed = time.monotonic() - t0
    assert res.correct is False and res.extracted is not None
    assert elapsed < verify_sandbox.WALL_FACTOR * 1.5, elapsed   # the limit is CPU time; wall only bounds hangs


def test_a_c_level_computation_is_killed_at_the_cpu_limit():
    """9^9^9^... is one big-integer power in C: no signal interrupts it, so the parent kills the child once it
    has used the call's CPU limit (read from /proc), whatever the wall time at the machine's load."""
    w = verify_sandbox._acquire()
    assert w is not None
    verdict = w.request([("5", "9^{9^{9^{9^{9^{9}}}}}")], budget=60.0, deadline=time.monotonic() + 120,
                        cpu_limit=0.5)
    assert verdict is None
    if w.last_cpu_s is not None:   # Linux: the child's CPU time on this request
        assert 0.5 <= w.last_cpu_s < 0.5 + 0.3, w.last_cpu_s
    w.kill()


def test_time_limit_holds_off_the_main_thread():
    out: list[tuple[bool, float]] = []
    verify_sandbox.warmup(2)  # one worker per concurrent caller

    def run() -> None:
        t0 = time.monotonic()
        out.append((verify(PATHOLOGICAL, "5", timeout=1.0).correct, time.monotonic() - t0))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(out) == 2
    for correct, elapsed in out:
        assert correct is False
        assert elapsed < verify_sandbox.WALL_FACTOR * 1.0, elapsed
    assert verify(box("x^2-1"), "(x-1)(x+1)").correct  # the pool still works afterwards


def test_worker_overrunning_its_deadline_is_killed():
    w = verify_sandbox._acquire()  # an idle pool worker (no start-up wait)
    assert w is not None
    t0 = time.monotonic()
    verdict = w.request([("5", "9^{9^{9^{9^{9^{9}}}}}")], budget=60.0, deadline=t0 + 0.5)
    assert verdict is None and time.monotonic() - t0 < 1.0
    w.kill()
    assert w.proc.poll() is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork only")
def test_forked_child_does_not_share_the_parents_workers():
    verify_sandbox.warmup(1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's idle workers are forgotten, the pool lock is usable
        try:
            ok = not verify_sandbox._idle and verify_sandbox._pool_lock.acquire(timeout=1)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    assert verify(box("3"), "3").correct  # the parent's pool is intact


def test_inline_fallback_is_time_limited_too():
    """RCEA_VERIFY_SANDBOX=inline (no worker process): interval timer in the main thread."""
    code = (
        "import time; from rcea.verify import verify\n"
        "assert verify('so $\\\\boxed{\\\\dfrac12}$', '0.5').correct\n"
        f"t = time.process_time(); r = verify({PATHOLOGICAL!r}, '5', timeout=1.0)\n"
        "print(r.correct, time.process_time() - t)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), RCEA_VERIFY_SANDBOX="inline")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    correct, elapsed = proc.stdout.split()
    assert correct == "False" and float(elapsed) < 1.5


def test_importing_the_verifier_is_light():
    """The aggregation role imports rcea: no sympy/math-verify until a comparison is needed."""
    code = "import sys, rcea.verify; print(sorted(m for m in ('sympy', 'math_verify') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr


# ------------------------------------------------------------------ batch CLI

CLI_LINES = [  # (input line, expected output)
    (json.dumps({"completion": box("5"), "reference": "5"}), {"correct": True, "extracted": "5"}),
    ("this is not json", "error"),
    (json.dumps({"completion": box("x = 5"), "reference": "5"}), {"correct": True, "extracted": "x = 5"}),
    (json.dumps({"completion": "The answer is 5.", "reference": "5"}), {"correct": False, "extracted": None}),
    (json.dumps({"completion": box("6")}), "error"),
    (json.dumps({"completion": 5, "reference": "5"}), "error"),
    (json.dumps(["completion", "reference"]), "error"),
    ("", "error"),
    (json.dumps({"completion": box("1"), "reference": "1", "timeout": "soon"}), "error"),
    (json.dumps({"completion": box("\\frac{1}{2}"), "reference": "0.5", "timeout": 2}),
     {"correct": True, "extracted": "\\frac{1}{2}"}),
    (json.dumps({"completion": box("7"), "reference": "8"}), {"correct": False, "extracted": "7"}),
]


def _check(line: str, expected) -> None:
    got = json.loads(line)
    if expected == "error":
        assert set(got) == {"error"} and isinstance(got["error"], str), got
    else:
        assert got == expected


def test_batch_cli_answers_each_line_in_order_and_flushes():
    """Each answer is read before the next line is sent: proves order and per-line flushing."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "rcea.verify"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        for line, expected in CLI_LINES:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 90)
            assert ready, f"no answer to {line!r}"
            _check(proc.stdout.readline(), expected)
        burst = [json.dumps({"completion": box(str(i)), "reference": str(i % 3)}) for i in range(6)]
        proc.stdin.write("\n".join(burst) + "\n")  # a burst: answers still come in order
        proc.stdin.close()
        got = [json.loads(proc.stdout.readline()) for _ in burst]
        assert [g["extracted"] for g in got] == [str(i) for i in range(6)]
        assert [g["correct"] for g in got] == [True, True, True, False, False, False]
        assert proc.wait(60) == 0
        assert proc.stdout.read() == ""  # exactly one output line per input line
    finally:
        if proc.poll() is None:
            proc.kill()


def test_batch_cli_survives_a_lone_surrogate_and_keeps_going():
    """A completion holding a lone surrogate cannot be written as UTF-8: that line gets one answer
    (an error or a verdict, never a crash) and every later line is still answered."""
    lines = [json.dumps({"completion": box("\ud800"), "reference": "5"}),
             json.dumps({"completion": "\ud800 " + box("5"), "reference": "5"}),
             "{not json",
             json.dumps({"reference": "5"}),
             json.dumps({"completion": box("5"), "reference": "5"})]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8")
    proc = subprocess.run([sys.executable, "-m", "rcea.verify"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(got) == len(lines), proc.stdout
    assert set(got[0]) == {"error"} or set(got[0]) == {"correct", "extracted"}
    assert got[1] == {"correct": True, "extracted": "5"}
    assert set(got[2]) == {"error"} and "bad JSON" in got[2]["error"]
    assert set(got[3]) == {"error"} and "completion" in got[3]["error"]
    assert got[4] == {"correct": True, "extracted": "5"}


def test_batch_cli_refuses_to_start_without_math_verify(tmp_path):
    """An environment where math-verify does not import: refuse at start (exit 2), naming the
    environment to use, instead of answering the string-comparable lines and failing the others."""
    (tmp_path / "math_verify.py").write_text("raise ImportError(\"No module named 'math_verify'\")\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    proc = subprocess.run([sys.executable, "-m", "rcea.verify"],
                          input=json.dumps({"completion": box("5"), "reference": "5"}) + "\n",
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "math-verify" in proc.stderr and ".envs/infer/bin/python -m rcea.verify" in proc.stderr


def test_batch_cli_help_and_a_reader_that_stops_early():
    """`--help` prints the usage and the line format; `| head -1` ends the run quietly (no BrokenPipe
    traceback), as a shell user would pipe it."""
    proc = subprocess.run([sys.executable, "-m", "rcea.verify", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python -m rcea.verify")
    assert '"completion"' in proc.stdout and '"correct"' in proc.stdout
    lines = "".join(json.dumps({"completion": box(str(i)), "reference": str(i)}) + "\n" for i in range(3000))
    shell = f"{shlex.quote(sys.executable)} -m rcea.verify | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", shell], input=lines, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.stdout == json.dumps({"correct": True, "extracted": "0"}) + "\n"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 0
