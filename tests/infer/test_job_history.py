"""A job's bytes do not depend on what its worker ran before (issue 31, fault table): the base policy's probe
job run first in a fresh worker and the same job run after an adapter job in one worker write byte-identical
Parquet parts. (Loading a LoRA adapter froze the base weights, and whether a weight requires grad picked
another matmul path for the strided (B, 1, H) decoding input: sampler log-probs moved by ~1e-6.)"""

from __future__ import annotations

from rcea.config import load_config
from rcea.layout import part_name, table_part
from rcea.store import manifest_path

from tests.infer.tiny_run import tiny_overrides


OVERRIDES = [*tiny_overrides(), "probe.k=4"]   # 4 samples a question: rows where the two paths round apart


def _payload(cfg, method: str, step: int, adapter: str | None) -> dict:
    return {"scale": "tiny", "overrides": OVERRIDES, "config_hash": cfg.hash(), "kind": "probe",
            "method": method, "step": step, "adapter": adapter}


def _run(payload: dict, ctx) -> dict[str, bytes]:
    """Run the job, return its parts' bytes, then remove them (so the next run writes them again)."""
    from infer.jobs import OUTPUTS, run_job

    summary = run_job(payload, ctx, lambda *a: None)
    assert "skipped" not in summary
    out = {}
    for table in OUTPUTS["probe"]:
        part = table_part("tiny", table, part_name(payload))
        out[table] = part.read_bytes()
        part.unlink()
        manifest_path(part).unlink()
    return out


def test_a_base_job_writes_the_same_bytes_alone_and_after_an_adapter_job(tiny_data):
    from infer.worker import Context

    cfg = load_config("tiny", None, OVERRIDES)
    base = _payload(cfg, "base", 0, None)
    adapter = _payload(cfg, "grpo", 4, "train/tiny/grpo/checkpoints/checkpoint-4")
    alone = _run(base, Context())
    worker = Context()
    _run(adapter, worker)
    after = _run(base, worker)
    assert set(after) == set(alone) == {"tokens", "questions", "samples"}
    for table in alone:
        assert after[table] == alone[table], f"{table} part differs after an adapter job"
