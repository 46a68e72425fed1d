"""The artifact store's layout: every path under the data folder, in one place.

    models/<name>/                              locally built models (the tiny scale)
    prepared/<scale>/train.jsonl                the drawn training pool
    train/<scale>/<run>/                        one training run (<run>: the method, or <method>-seed<N>)
        config/                                 configuration, copied verbatim
        run.lock                                held by the process training into this folder
        checkpoints/checkpoint-<step>/          LoRA adapter + trainer state (complete ones only), with
                                                TRAINER_STATE, the objective trainer's own state
        steps.jsonl, tb/                        per-step log, TensorBoard mirror
    seeds/<scale>/<method>/                     the run-to-run noise runs (train.noise_study)
    state/<scale>.sqlite                        the study's one state store (rcea.state): its measurement jobs
                                                (the queue: infer.queue) and its units' records (attempts,
                                                times, errors); under Compose this folder
                                                is the host's, bind-mounted into every container
    infer/<scale>/tables/<table>/<part>.parquet the sample schema (rcea/schema.py), one part per job
    infer/<scale>/semantic/                     validity and mode labels, judge_calibration.json;
                                                audit/audit.sqlite, audit/report.json
    llm_cache/<client>/                         cached judge and codebook responses
    results/<scale>/                            aggregated summary, tables, figures, report
    logs/units/                                 logs of work units (a training run, a batch of measurement jobs)

`root` is the data folder as the caller sees it: `rcea.paths.data_dir()` by default (`RCEA_DATA`, else
./data), or the folder a command line names (the Compose volume is "data" inside the containers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rcea.paths import data_dir

RUN_LOCK = "run.lock"  # in each training run folder: held (flock) by the process training into it
TRAINER_STATE = "rcea_trainer_state.pt"  # in each checkpoint folder; train.trainer writes it, its manifest marks
                                         # the checkpoint complete


def _root(root: str | Path | None) -> Path:
    return data_dir() if root is None else Path(root)


def models_dir(name: str, root: str | Path | None = None) -> Path:
    return _root(root) / "models" / name


def prepared_pool(scale: str, root: str | Path | None = None) -> Path:
    return _root(root) / "prepared" / scale / "train.jsonl"


def run_dir(scale: str, run: str, root: str | Path | None = None) -> Path:
    return _root(root) / "train" / scale / run


@dataclass(frozen=True)
class RunFolder:
    """The files of one training run folder (the default `run_dir`, or any --output folder)."""
    path: Path

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"checkpoint-{step}"

    @property
    def steps_log(self) -> Path:
        return self.path / "steps.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tb"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def config(self) -> Path:
        return self.path / "config"

    @property
    def lock(self) -> Path:
        return self.path / RUN_LOCK


def superseded_run_dir(scale: str, run: str, config_hash: str, root: str | Path | None = None) -> Path:
    """Where a run folder trained under other settings is kept when a run of new settings takes its place."""
    return _root(root) / "superseded" / "train" / scale / f"{run}-{config_hash}"


def run_folder(scale: str, run: str, root: str | Path | None = None) -> RunFolder:
    return RunFolder(run_dir(scale, run, root))


def checkpoints_dir(scale: str, run: str, root: str | Path | None = None) -> Path:
    return run_folder(scale, run, root).checkpoints


def checkpoint_dir(scale: str, run: str, step: int, root: str | Path | None = None) -> Path:
    """One checkpoint folder; `root=""` gives it relative to the data folder (what job payloads name)."""
    return run_folder(scale, run, root).checkpoint(step)


def logs_dir(what: str, root: str | Path | None = None) -> Path:
    """Logs of work units (`units`: a training run, a batch of measurement jobs; orchestrate.engines.batch)."""
    return _root(root) / "logs" / what


def seeds_dir(scale: str, method: str, root: str | Path | None = None) -> Path:
    return _root(root) / "seeds" / scale / method


def infer_dir(scale: str, root: str | Path | None = None) -> Path:
    return _root(root) / "infer" / scale


def state_path(scale: str, root: str | Path | None = None) -> Path:
    """The study's one state store (SQLite, rcea.state): the queue's jobs and the unit records, one file per
    scale (the local engine's; a Ray study's is on the driver's disk: rcea.state.driver_path)."""
    return _root(root) / "state" / f"{scale}.sqlite"



def tables_dir(scale: str, root: str | Path | None = None) -> Path:
    return infer_dir(scale, root) / "tables"


def table_part(scale: str, table: str, part: str, root: str | Path | None = None) -> Path:
    """One job's part of a table (its manifest beside it): what work units check for completeness."""
    return tables_dir(scale, root) / table / f"{part}.parquet"


def part_name(payload: dict) -> str:
    """The table part a measurement job writes: `<kind>-<method>-<step>`."""
    return f"{payload['kind']}-{payload['method']}-{payload['step']}"


def part_run(record: dict) -> str | None:
    """The run a table part measured, read from the part's own manifest `record` (what infer.tables writes),
    never from its file name: the checkpoint folder it measured (`model` for a full model, else `adapter`:
    train/<scale>/<run>/checkpoints/checkpoint-<step>), else its job (`<kind>:<run>-<step>`, the step being the
    last `-` field: the base policy's parts name no folder). None when the record names neither."""
    folder = record.get("model") or record.get("adapter")
    if isinstance(folder, str):
        parts = Path(folder).parts
        if len(parts) >= 3 and parts[0] == "train":   # train/<scale>/<run>/checkpoints/...
            return parts[2]
    job = record.get("job")
    if isinstance(job, str) and ":" in job and "-" in job:
        run, _, step = job.split(":", 1)[1].rpartition("-")
        return run if step.isdigit() else None
    return None


def run_parts(scale: str, run: str, root: str | Path | None = None) -> list[Path]:
    """Every table part of one run's checkpoints under the scale's tables, each with its manifest: found through
    the record each manifest keeps (`part_run`), so no run's name can take another's parts (`passk-my-grpo-4` is
    run `my-grpo`'s, not `grpo`'s). A part without a manifest (its job was killed before it finished) is the
    run's, or one whose manifest records no run (written by hand), when its name is exactly `part_name` of one of
    the study's kinds, this run and a step."""
    import json

    found = []
    for part in sorted(tables_dir(scale, root).glob("*/*.parquet")):
        manifest = part.with_name(part.name + ".manifest.json")
        try:
            record = json.loads(manifest.read_text()) if manifest.exists() else None
        except (OSError, ValueError):
            record = None
        named = part_run(record) if isinstance(record, dict) else None
        if named is not None:
            found += [part, manifest] if named == run else []
            continue
        stem = part.name[:-len(".parquet")]
        if any(stem.startswith(f"{kind}-{run}-") and stem[len(kind) + len(run) + 2:].isdigit()
               for kind in __getattr__("JOB_KINDS")):
            found += [part, *([manifest] if manifest.exists() else [])]
    return found


def job_parts(kind: str, payload: dict, root: str | Path | None = None) -> list[Path]:
    """Every table part one measurement job writes (what `rcea.store.job_complete` checks): the job names its
    tables (`payload["tables"]`, set by its kind's module in infer/kinds/ when the job is planned)."""
    tables = payload.get("tables")
    if not tables or not isinstance(tables, list):
        raise ValueError(f"the {kind} job {part_name(payload)} names no tables; plan it again "
                         "(python -m infer plan / enqueue: each job's payload lists the tables it writes)")
    return [table_part(payload["scale"], t, part_name(payload), root) for t in tables]


def __getattr__(name: str):
    """`JOB_KINDS`: the measurement job kinds a study plans (configs/base.toml `measure.kinds` over the kind
    modules of infer/kinds/: rcea.kinds.resolve), read when first asked for; the orchestration's `--what`
    choices, which it needs without the inference role's code."""
    if name == "JOB_KINDS":   # the file itself: rcea.config reaches rcea.store, which imports this module, so
        import tomllib        # going through rcea.config's reader would close an import cycle

        from rcea.kinds import resolve
        from rcea.paths import configs_dir

        with (configs_dir() / "base.toml").open("rb") as fh:
            return resolve(tomllib.load(fh)["measure"]["kinds"]["value"])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def semantic_dir(scale: str, root: str | Path | None = None) -> Path:
    return infer_dir(scale, root) / "semantic"


def audit_db(scale: str, root: str | Path | None = None) -> Path:
    return semantic_dir(scale, root) / "audit" / "audit.sqlite"


def audit_report(scale: str, root: str | Path | None = None) -> Path:
    """The partition audit's metrics and gates (`python -m infer.audit report`)."""
    return audit_db(scale, root).with_name("report.json")


def judge_calibration(scale: str, root: str | Path | None = None) -> Path:
    """The validity judge's calibration metrics (`python -m infer.judge calibrate`), read by the report."""
    return semantic_dir(scale, root) / "judge_calibration.json"


def llm_cache_dir(client: str, root: str | Path | None = None) -> Path:
    return _root(root) / "llm_cache" / client


def results_dir(scale: str, root: str | Path | None = None) -> Path:
    return _root(root) / "results" / scale
