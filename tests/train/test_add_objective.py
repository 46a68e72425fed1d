"""Adding a method is one module of train/objectives/ and one section of configs/objectives.toml (issue 39): in a
copy of the tree, a copy of GRPO named `grpo_copy` (its module, its section with its label) is a method
everywhere the method list is read and trains one step at tiny through `python -m train`. Nothing else is edited,
so the test fails wherever a second file would be needed."""

from __future__ import annotations

import json
import re

from tests.common.tree_copy import copy_tree, run_in

FAST = ["toy.warm_start_steps=0", "train.max_completion_tokens=8", "train.warmup_ratio=0.0", "data.draw_size=32",
        "train.per_device_batch=16", "train.num_iterations=1"]

RUN = f"""
import json, sys
from rcea.config import METHOD_LABELS, METHODS
from rcea.prepare import prepare
from train.cli import main, parser
from train.objectives import REGISTRY
print(json.dumps({{"methods": METHODS, "label": METHOD_LABELS.get("grpo_copy"), "registry": list(REGISTRY),
                  "help": parser().format_help()}}))
prepare("tiny", {FAST!r})
sys.exit(main(["--scale", "tiny", "--method", "grpo_copy", "--reward", "synthetic", "--max-steps", "1",
               *[a for o in {FAST!r} for a in ("--override", o)]]))
"""


def test_one_module_and_one_section_add_a_method_that_trains(tmp_path):
    tree = copy_tree(tmp_path / "tree")
    module = (tree / "train/objectives/grpo.py").read_text()
    assert module.count('@register("grpo",') == 1
    toml = (tree / "configs/objectives.toml").read_text()
    section = re.search(r"(?ms)^\[grpo\]\n(.*?)(?=^\[)", toml).group(1)
    assert section.startswith('label = "GRPO"\n')
    (tree / "configs/objectives.toml").write_text(toml + '\n[grpo_copy]\nlabel = "GRPO copy"\n' + section[15:])

    # the section alone: the package refuses to import and names the module to add
    out = run_in(tree, "import train.objectives", tmp_path / "data", timeout=120)
    assert out.returncode != 0 and "no module registers grpo_copy: add train/objectives/grpo_copy.py" in out.stderr
    (tree / "train/objectives/grpo_copy.py").write_text(module.replace('@register("grpo",', '@register("grpo_copy",'))
    out = run_in(tree, RUN, tmp_path / "data", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    listed = json.loads(out.stdout.splitlines()[0])
    assert listed["methods"][-1] == "grpo_copy" and listed["registry"] == listed["methods"]   # section order
    assert listed["label"] == "GRPO copy" and "grpo_copy" in listed["help"]
    run = tmp_path / "data" / "train" / "tiny" / "grpo_copy"
    resolved = json.loads((run / "config" / "resolved.json").read_text())
    assert resolved["method"] == "grpo_copy" and resolved["settings"]["objectives.grpo_copy.epsilon"]["value"] == 0.2
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines() if line.strip()]
    assert [s["step"] for s in steps] == [1] and all(v == v for v in steps[0].values() if isinstance(v, float))
    assert (run / "checkpoints" / "checkpoint-1" / "adapter_model.safetensors").exists()
