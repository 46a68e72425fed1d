"""Adding a measurement kind is one module of infer/kinds/ and one settings section of configs/base.toml (issue
39): in a copy of the tree, a kind `lengths` (greedy completions of a few questions at the base policy and the
final checkpoint, into the greedy table) is a `--what` choice of the orchestration and of the inference role, is
planned by `python -m infer plan --what all` and runs at tiny through `python -m infer run-job`. Nothing else is
edited, so the test fails wherever a second file would be needed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from tests.common.tree_copy import copy_tree, run_in
from tests.infer.tiny_run import tiny_overrides

MODULE = '''"""Completion lengths: greedy completions of `lengths.questions` questions of the trace benchmark."""

from infer.kinds.common import check_answer, checkpoint_of, encode, use
from infer.kinds.registry import BASE, register


def checkpoints(p):
    return [(ck, {}) for ck in (BASE, *p.checkpoints[-1:])]


def cost(p, extra):
    return float(p.cfg["lengths.questions"] * p.cfg["lengths.max_new_tokens"])


@register("lengths", tables=("greedy",), section="lengths", budget="lengths.max_new_tokens",
          checkpoints=checkpoints, cost=cost)
def run_lengths(payload, cfg, ctx, progress):
    from infer.backends import SamplingSpec
    from infer.tables import frame
    from rcea.data import benchmark_questions

    gen, _ = ctx.backends(cfg)
    use(gen, checkpoint_of(payload))
    bench = cfg["eval.trace_benchmark"]
    qs = benchmark_questions(bench, cfg["lengths.questions"])
    outs = gen.generate([encode(ctx.tokenizer, q["problem"], cfg) for q in qs],
                        SamplingSpec(cfg["lengths.max_new_tokens"], greedy=True))
    rows = [{"scale": payload["scale"], "method": payload["method"], "step": payload["step"], "benchmark": bench,
             "question_id": q["id"], "n_tokens": len(o.token_ids), "truncated": not o.finished,
             "correct": bool(check_answer(ctx.tokenizer.decode(o.token_ids, skip_special_tokens=True),
                                          q["answer"]).correct), "boxed": False} for q, o in zip(qs, outs)]
    progress("lengths", 1, 1)
    return {"greedy": frame("greedy", rows)}, {}
'''

SECTION = '''
[lengths]
questions = { value = 3, status = "C", doc = "questions of the trace benchmark whose greedy completion lengths are measured" }
max_new_tokens = { value = 6, status = "C", doc = "completion-token budget of the lengths kind" }
'''

NAMES = """
import json
from rcea.layout import JOB_KINDS
from infer import kinds
print(json.dumps({"orchestration": JOB_KINDS, "registry": list(kinds.REGISTRY)}))
"""


def test_one_module_and_one_section_add_a_kind_that_is_planned_and_runs(tiny_data, tmp_path):
    tree = copy_tree(tmp_path / "tree")
    (tree / "infer/kinds/lengths.py").write_text(MODULE.replace('register("lengths"', 'register("lens"'))
    wrong = run_in(tree, "import infer.kinds", tmp_path)       # the name a module registers is its file's
    assert wrong.returncode != 0 and "registers one kind, named as its file" in wrong.stderr
    (tree / "infer/kinds/lengths.py").write_text(MODULE)
    with (tree / "configs/base.toml").open("a") as fh:
        fh.write(SECTION)
    data = tmp_path / "tree-data"
    shutil.copytree(tiny_data, data)

    names = run_in(tree, NAMES, data)
    assert names.returncode == 0, names.stderr[-3000:]
    assert json.loads(names.stdout) == {"orchestration": ["greedy", "passk", "probe", "covariance", "lengths"],
                                        "registry": ["greedy", "passk", "probe", "covariance", "lengths"]}

    env = {"RCEA_DATA": str(data), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    overrides = [a for o in tiny_overrides() for a in ("--override", o)]   # the fixture's model (no warm start)
    plan = subprocess.run([sys.executable, "-m", "infer", "plan", "--scale", "tiny", "--method", "grpo", *overrides],
                          cwd=tree, capture_output=True, text=True, timeout=120, env=env)
    assert plan.returncode == 0, plan.stderr[-3000:]
    jobs = [json.loads(line) for line in plan.stdout.splitlines()]
    mine = [j for j in jobs if j["kind"] == "lengths"]
    assert [j["key"] for j in mine] == ["lengths:base-0", "lengths:grpo-4"]      # base and the final checkpoint
    assert all(j["cost"] == 18.0 and j["payload"]["tables"] == ["greedy"] for j in mine)
    assert {j["kind"] for j in jobs} == {"greedy", "passk", "probe", "covariance", "lengths"}

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(mine[1]))
    run = subprocess.run([sys.executable, "-m", "infer", "run-job", "--spec-file", str(spec), "--backend", "hf"],
                         cwd=tree, capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "lengths:grpo-4: done {'greedy': 3}" in run.stdout
    part = data / "infer" / "tiny" / "tables" / "greedy" / "lengths-grpo-4.parquet"
    import pyarrow.parquet as pq

    rows = pq.read_table(part).to_pylist()
    assert len(rows) == 3 and all(r["step"] == 4 and 1 <= r["n_tokens"] <= 6 for r in rows)
    assert part.with_name(part.name + ".manifest.json").exists()
