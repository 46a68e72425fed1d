"""The resource plan before GPU work: `invoke train` and `invoke study` at a scale launched on GPUs run
`python -m train.plan` (locally, on CPU, in .envs/train) and stop before any container starts when a stage does
not fit (docs/plan.md). `--dry` prints the plan's command with the others."""
from __future__ import annotations

from invoke.exceptions import Exit

from orchestrate.ops.commands import plan_command
from orchestrate.ops.shell import run_all

H_GPU = "card the plan checks (configs/plan.toml [cards]; default: the scale's first training card)"
PLAN_HELP = {"scale": "model scale (configs/scales/*.toml)", "num-gpus": "GPUs of the study (its makespan)",
             "gpu": "card: configs/plan.toml [cards] (h100-80gb, rtx-5090-32gb, ...) or all (every card's table)",
             "override": "config override key=value (repeatable)"}


def plan_first(c, scale: str, gpu: str = "", overrides=()) -> None:
    """Run the plan for `scale` (tasks.py `_at`: a scale launched on GPUs); exit 1 when it says no."""
    print(f"=== plan: will {scale} fit? (python -m train.plan, CPU, about half a minute)", flush=True)
    got = run_all(c, [plan_command(scale, gpu, overrides=list(overrides))], warn=True)[0]
    if got is not None and got.exited:
        raise Exit(f"stopped before any container started: the plan above says a stage does not fit; set the fix "
                   f"it names (--override ...), or check another card with `invoke plan --scale {scale} --gpu ...`",
                   code=1)
