"""The `ray` engine of `invoke study`: the training and measurement stages as Ray tasks.

    engine = RayStage(scale, methods, address=None, local=run_local)
    engine(c, stage, log_dir)       called per stage by the study runner (orchestrate/ops/study.py)

Stage `train` becomes one TrainUnit per method, and as soon as a run has finished (or is found complete),
its measurement jobs follow (listed by `python -m infer plan`, the inference role's command line, the
base-policy jobs once), grouped per checkpoint, while the other runs still train. Stage `workers` plans every
run's jobs again and runs what is left (nothing, unless a kill interrupted the train stage). Both go to
`orchestrate.engines.execute(..., engine="ray")`. The other stages
(prepare, judge, modes, audit, aggregate, results) are not GPU work units: they run through `local`,
the default engine. Overrides reach every unit through RCEA_OVERRIDES (set by the study task).
"""

from __future__ import annotations

from invoke.exceptions import Exit

from orchestrate.units import MeasureUnit, TrainUnit, role_python
from rcea.launch import launch


class RayStage:
    """`num_workers`: measurement units side by side (None: the scale's `workers` on a local Ray, and on a
    cluster as many as its nodes' `infer` slots take), as the local engine's worker processes."""

    def __init__(self, scale: str, methods, address: str | None = None, local=None, log=print,
                 num_workers: int | None = None):
        self.scale, self.methods, self.address, self.local, self.log = scale, list(methods), address, local, log
        self.launch = launch(scale)
        self.gpus = self.launch.gpus
        self.num_workers = self.launch.workers if num_workers is None else num_workers
        self.cap = num_workers   # given: also a cap on a cluster

    def __call__(self, c, stage, log_dir) -> None:
        if stage.key not in ("train", "workers"):
            return self.local(c, stage, log_dir)
        where = self.address or "a local Ray started here"
        if c.config.run.dry:
            what = (f"{len(self.methods)} training run(s), each followed by its measurements as soon as it has "
                    "finished," if stage.key == "train"
                    else "the measurement jobs of `python -m infer plan` for each run, grouped per checkpoint")
            print(f"[ray] {what} as Ray tasks on {where}")
            return
        if stage.key == "train":   # each run's measurements start as soon as that run has finished
            self.run(self.train_units(), stage.key, follow=self.after)
        else:                      # whatever the train stage left (a rerun after a kill): complete units skip
            self.run(self.measure_units(), stage.key)

    def train_units(self) -> list[TrainUnit]:
        return [TrainUnit(m, self.scale) for m in self.methods]

    def after(self, unit) -> list[MeasureUnit]:
        """The units that follow a finished one: a training run's measurement jobs."""
        return self.plan(unit.method) if isinstance(unit, TrainUnit) else []

    def plan(self, method: str) -> list[MeasureUnit]:
        """The measurement jobs of one run, as the inference role's own command line lists them
        (`python -m infer plan`: a unit is data, so the driver never imports the role)."""
        import json
        import subprocess

        from rcea.paths import project_root

        argv = [role_python("infer"), "-m", "infer", "plan", "--scale", self.scale, "--method", method, "--what", "all"]
        out = subprocess.run(argv, cwd=project_root(), capture_output=True, text=True)
        if out.returncode != 0:
            why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            raise Exit(f"[ray] cannot plan the measurements of {method}: {why}", code=1)
        return [MeasureUnit.from_job(json.loads(line)) for line in out.stdout.splitlines() if line.strip()]

    def measure_units(self) -> list[MeasureUnit]:
        return [u for m in self.methods for u in self.plan(m)]

    def run(self, units, stage: str, follow=None) -> None:
        from orchestrate.engines import execute

        opts = {"address": self.address, "gpus": self.gpus}
        if not self.address:   # a local Ray: the scale's training slots and the measurement workers
            opts["parallel"] = {"train": self.launch.train_slots(), "infer": self.num_workers}
        if self.cap is not None:
            opts["limit"] = {"infer": self.cap}
        report = execute(units, "ray", log=self.log, label=stage, follow=follow, **opts)
        if report.failed:
            lines = "\n".join(f"  {k}: {v}" for k, v in sorted(report.failed.items()))
            raise Exit(f"[ray] {len(report.failed)} unit(s) of stage {stage} failed:\n{lines}\n"
                       "fix the cause (each names its log under <data>/logs/units/) and rerun: complete units "
                       "are skipped", code=1)
