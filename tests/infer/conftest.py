"""Shared fixtures for the inference tests: a tiny model and a fake training run, built once per session.

`tiny_data` is a data folder (what RCEA_DATA points at) holding models/tiny and
train/tiny/grpo/checkpoints/checkpoint-{2,4}: LoRA adapters with small random weights, the second one
a small step away from the first, and trainer_state.json files like the training role writes.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from tests.infer.tiny_run import tiny_overrides

torch.set_num_threads(1)   # the tiny model on a shared CPU: extra threads only spin

CHECKPOINT_STEPS = (2, 4)


def _build(root):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rcea.config import load_config
    from rcea.layout import TRAINER_STATE
    from rcea.store import write_manifest
    from rcea.tiny import model_path

    old = os.environ.get("RCEA_DATA")
    os.environ["RCEA_DATA"] = str(root)
    try:
        cfg = load_config("tiny", None, tiny_overrides())
        base = model_path(cfg)
    finally:
        if old is None:
            os.environ.pop("RCEA_DATA")
        else:
            os.environ["RCEA_DATA"] = old
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=cfg["train.lora_targets"],
                                            init_lora_weights=False))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.mul_(0.05)
    for step in CHECKPOINT_STEPS:
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_B" in name:
                    p.add_(0.02 * torch.randn_like(p))
        ckpt = root / "train" / "tiny" / "grpo" / "checkpoints" / f"checkpoint-{step}"
        peft.save_pretrained(ckpt)
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max(CHECKPOINT_STEPS)}))
        (ckpt / TRAINER_STATE).write_bytes(b"state")
        write_manifest(ckpt / TRAINER_STATE, step=step)   # training writes it last: the checkpoint is complete
    (root / "base_model.txt").write_text(str(base))
    return root


@pytest.fixture(scope="session")
def tiny_data_template(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("rcea-data"))


@pytest.fixture
def tiny_data(tiny_data_template, tmp_path, monkeypatch):
    """A private copy of the template data folder, with RCEA_DATA pointing at it."""
    root = tmp_path / "data"
    shutil.copytree(tiny_data_template, root)
    monkeypatch.setenv("RCEA_DATA", str(root))
    return root


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_data_template):
    from pathlib import Path
    return Path((tiny_data_template / "base_model.txt").read_text())


@pytest.fixture
def built(monkeypatch):
    """infer.worker.Context.backends with both backends stood in: build(device, backend, overrides, scale) gives
    ({kind: kwargs} of what it asked for, generator, scorer, describe())."""
    import infer.backends

    from rcea.config import load_config
    import infer.worker as worker

    made = []

    class Fake:
        tokenizer = object()

    def get_backend(kind, path, **kw):
        made.append((kind, kw))
        return Fake()

    monkeypatch.setattr(infer.backends, "get_backend", get_backend)
    monkeypatch.setattr(worker, "resolve_model", lambda cfg: "a-model")
    monkeypatch.setattr(worker, "_has_vllm", lambda: True)

    def build(device, backend="auto", overrides=(), scale="7b"):
        made.clear()
        ctx = worker.Context(device, backend)
        gen, scorer = ctx.backends(load_config(scale, None, list(overrides)))
        return dict(made), gen, scorer, ctx.describe()
    return build
