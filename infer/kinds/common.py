"""What every kind's runner shares: the job's configuration, its checkpoint, prompts, answer checks and seeds.
Standard library at import (numpy when a seed is drawn): the plan imports the kind modules, and the
orchestration's environment plans in-process without numpy."""

from __future__ import annotations

import zlib

from rcea.config import load_config
from rcea.data import chat_messages
from rcea.paths import data_dir
from rcea.store import checkpoint_complete


class JobInputError(RuntimeError):
    """The inputs of a job are missing or malformed; the message says which and what to do."""


def derive_seed(base: int, question_id: str, k: int) -> int:
    """A per-sample seed from (base seed, question, sample index); independent of processing order."""
    import numpy as np

    return int(np.random.SeedSequence([base, zlib.crc32(question_id.encode()), k]).generate_state(1)[0])


def job_config(payload: dict):
    cfg = load_config(payload["scale"], None, payload.get("overrides", ()))
    if cfg.hash() != payload["config_hash"]:
        raise JobInputError(f"the configuration changed since this job was enqueued ({cfg.hash()} != "
                            f"{payload['config_hash']}); re-enqueue with --retry-failed or restore the config")
    return cfg


def adapter_path(rel: str | None) -> str | None:
    """The absolute folder of a checkpoint named relative to the data folder (None: the base policy), checked
    complete (rcea.store.checkpoint_complete)."""
    if rel is None:
        return None
    path = data_dir() / rel
    if not checkpoint_complete(path):
        raise JobInputError(f"checkpoint {rel} is missing or incomplete (needs its adapter files, or a full model's "
                            "config.json and weights, and the manifest written last); finish or rerun training "
                            "(or infer.outside), then re-enqueue with --retry-failed")
    damaged = _verified(str(path))
    if damaged:   # a file's bytes differ from the checkpoint's manifest: named, with the checkpoint to delete
        raise JobInputError(damaged)
    return str(path)


_VERIFIED: dict[str, str] = {}


def _verified(path: str) -> str:
    """rcea.store.verify_checkpoint (every file's SHA-256 against the manifest), once per checkpoint and process:
    the jobs of one batch read the same checkpoint."""
    if path not in _VERIFIED:
        from rcea.store import verify_checkpoint

        _VERIFIED[path] = verify_checkpoint(path)
    return _VERIFIED[path]


def checkpoint_of(payload: dict, suffix: str = "") -> tuple[str | None, str | None]:
    """(adapter, full model) folders of the checkpoint a job names (`adapter<suffix>`, `model<suffix>`; one of
    them at most is set, none for the base policy), absolute and checked complete."""
    model = payload.get(f"model{suffix}")
    if model is not None:
        return None, adapter_path(model)
    return adapter_path(payload.get(f"adapter{suffix}")), None


def use(backend, checkpoint: tuple[str | None, str | None]) -> None:
    """Point a backend at a checkpoint of `checkpoint_of`: a full model folder is loaded as the model itself
    (no adapter; the base's tokenizer), an adapter goes over the base, neither is the base policy."""
    adapter, model = checkpoint
    if model is not None:
        backend.set_model(model)
    else:
        backend.set_adapter(adapter)


def encode(tokenizer, problem: str, cfg) -> list[int]:
    ids = tokenizer.apply_chat_template(chat_messages(problem, cfg), add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def check_answer(text: str, reference: str):
    from rcea.verify import verify
    return verify(text, reference)
