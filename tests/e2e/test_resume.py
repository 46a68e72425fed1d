"""A study resumes by rerunning the same command: the quick demo with the local engine, from the demo's
models, killed -9 (its whole process group) at a seeded random moment of each of its eight stages, rerun with
the same command after every kill and once more to the end, gives the uninterrupted demo's every table part
byte for byte, its labels and its report (tests/e2e/studies.py: resumed_study)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.studies import STAGES


def _files(root: Path, pattern: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob(pattern))}


def test_a_study_killed_in_every_stage_and_rerun_gives_the_uninterrupted_results(demo, studies):
    data, _, _ = demo
    new, study = studies["resume"].result()
    run = study.run
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert study.kills, "no kill landed"
    aimed = [k[0] for k in study.kills]
    assert aimed == list(STAGES[:len(aimed)]), study.kills        # one kill per stage, in order
    assert "train" in {k[1] for k in study.kills}, study.kills    # at least one kill mid-training
    tables = Path("infer") / "tiny" / "tables"
    parts = _files(new / tables, "*.parquet")
    assert parts and parts == _files(data / tables, "*.parquet")   # every table part, byte for byte
    semantic = Path("infer") / "tiny" / "semantic"
    assert _files(new / semantic, "*.parquet") == _files(data / semantic, "*.parquet")
    for m in ("grpo", "kl_cov"):                                  # the same weights at every checkpoint
        ckpts = Path("train") / "tiny" / m / "checkpoints"
        assert _files(new / ckpts, "adapter_model.safetensors") == _files(data / ckpts, "adapter_model.safetensors")
    report = (new / "results" / "tiny" / "report.md").read_text()
    demo_report = (data / "results" / "tiny" / "report.md").read_text()
    assert report.replace(str(new), "<data>") == demo_report.replace(str(data), "<data>")
    assert (new.parent / "results" / "tiny" / "report.md").read_text() == report   # published to the host
