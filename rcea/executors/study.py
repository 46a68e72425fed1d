"""The `ray` engine of `invoke study`: the training and measurement stages as Ray tasks.

    engine = RayStage(scale, methods, address=None, local=run_local)
    engine(c, stage, log_dir)       called per stage by the study runner (rcea/ops/study.py)

Stage `train` becomes one TrainUnit per method; stage `workers` becomes every measurement job of those
runs (planned on the driver exactly as `python -m infer plan` lists them, the base-policy jobs once),
grouped per checkpoint. Both go to `rcea.executors.execute(..., engine="ray")`. The other stages
(prepare, judge, modes, audit, aggregate, results) are not GPU work units: they run through `local`,
the default executor. Overrides reach every unit through RCEA_OVERRIDES (set by the study task).
"""

from __future__ import annotations

from invoke.exceptions import Exit

from rcea.units import SLOTS, MeasureUnit, TrainUnit



class RayStage:
    def __init__(self, scale: str, methods, address: str | None = None, local=None, log=print):
        self.scale, self.methods, self.address, self.local, self.log = scale, list(methods), address, local, log
        self.gpus = scale != "tiny"

    def __call__(self, c, stage, log_dir) -> None:
        if stage.key not in ("train", "workers"):
            return self.local(c, stage, log_dir)
        where = self.address or "a local Ray started here"
        if c.config.run.dry:
            what = (f"{len(self.methods)} training run(s)" if stage.key == "train"
                    else "the measurement jobs of `python -m infer plan` for each run, grouped per checkpoint")
            print(f"[ray] {what} as Ray tasks on {where}")
            return
        units = self.train_units() if stage.key == "train" else self.measure_units()
        self.run(units, stage.key)

    def train_units(self) -> list[TrainUnit]:
        return [TrainUnit(m, self.scale) for m in self.methods]

    def measure_units(self) -> list[MeasureUnit]:
        from rcea.config import load_config

        from infer.plan import plan_jobs   # standard library only: runs in the driver's environment

        cfg = load_config(self.scale)
        units = []
        for m in self.methods:
            try:
                units += [MeasureUnit.from_job(j) for j in plan_jobs(cfg, self.scale, m, "all", [])]
            except FileNotFoundError as exc:
                raise Exit(f"[ray] cannot plan the measurements of {m}: {exc}", code=1)
        return units

    def run(self, units, stage: str) -> None:
        from rcea.executors import execute

        opts = {"address": self.address, "gpus": self.gpus}
        if not self.gpus and not self.address:
            opts["parallel"] = dict(SLOTS["cpu"])   # a local Ray on CPU: the tiny scale's slots
        report = execute(units, "ray", log=self.log, label=stage, **opts)
        if report.failed:
            lines = "\n".join(f"  {k}: {v}" for k, v in sorted(report.failed.items()))
            raise Exit(f"[ray] {len(report.failed)} unit(s) of stage {stage} failed:\n{lines}\n"
                       "fix the cause (each names its log under <data>/logs/units/) and rerun: complete units "
                       "are skipped", code=1)
