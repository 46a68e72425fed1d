"""Adding a scale is one file, configs/scales/<scale>.toml (issue 39): in a copy of the tree, a local scale `mini`
(tiny's values, a smaller LoRA) and a GPU scale `big` (3b's file, a shorter run) are in every scale list (the
configuration's, the device checks' shapes, the resource plan's target cards, the settings document's columns),
load, plan their measurements and print their study with `invoke study --dry`. Nothing else is edited, so the
test fails wherever a second file would be needed."""

from __future__ import annotations

import json
import sys

from tests.common.tree_copy import copy_tree, run_in

LISTS = """
import json
from rcea.config import SCALES, load_config
from rcea.device_check import GPU_SCALES, SHAPES
from rcea.launch import launch
from rcea.settings_doc import render
from train.plan_data import targets
header = next(line for line in render().splitlines() if line.startswith("| setting"))
print(json.dumps({"scales": SCALES, "gpu": GPU_SCALES, "same_shape": SHAPES["big"] == SHAPES["3b"],
                  "targets": targets("big"), "steps": [load_config(s)["train.max_steps"] for s in ("mini", "big")],
                  "rank": load_config("mini")["train.lora_rank"], "local": [launch(s).local for s in ("mini", "big")],
                  "columns": header}))
"""


def test_one_file_adds_a_scale_to_every_list(tmp_path):
    tree = copy_tree(tmp_path / "tree")
    scales = tree / "configs" / "scales"
    tiny = (scales / "tiny.toml").read_text()
    assert tiny.count("lora_rank = 8") == 1
    (scales / "mini.toml").write_text(tiny.replace("lora_rank = 8", "lora_rank = 4"))
    (scales / "big.toml").write_text((scales / "3b.toml").read_text() + "\n[train]\nmax_steps = 2000\n")
    data = tmp_path / "data"

    out = run_in(tree, LISTS, data)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["scales"] == ["mini", "tiny", "3b", "7b", "big"]      # local ones first, then by name
    assert got["gpu"] == ["3b", "7b", "big"] and got["same_shape"]
    assert got["targets"]["train"] == ["h100-80gb", "rtx-pro-6000-96gb"]
    assert got["steps"] == [100, 2000] and got["rank"] == 4 and got["local"] == [True, False]
    assert got["columns"].split(" | ")[2:6] == ["mini", "tiny", "7b", "big"]   # each scale that changes a value

    plan = run_in(tree, "import json; from rcea.config import load_config; from infer.plan import plan_jobs; "
                        "print(json.dumps(plan_jobs(load_config('big'), 'big', 'base', 'all', [])))", data)
    assert plan.returncode == 0, plan.stderr[-3000:]
    jobs = json.loads(plan.stdout)   # the base policy's jobs (what `invoke study` enqueues first)
    assert {j["payload"]["scale"] for j in jobs} == {"big"} and {j["kind"] for j in jobs} == {"greedy", "passk",
                                                                                             "probe"}
    for scale, compose in (("mini", False), ("big", True)):   # a local process, or a container of compose.yaml
        study = run_in(tree, f"import sys; from invoke.main import program; sys.argv = ['invoke', 'study', "
                             f"'--scale', '{scale}', '--dry']; program.run()", data, python=sys.executable)
        assert study.returncode == 0, (study.stdout + study.stderr)[-3000:]
        assert "dry run: nothing ran" in study.stdout and f"--scale {scale}" in study.stdout
        assert ("docker compose run" in study.stdout) == compose and "-m train" in study.stdout
