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

CHECKPOINT_STEPS = (2, 4)


def _build(root):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rcea.config import load_config
    from rcea.store import atomic_write_json, write_manifest
    from rcea.tiny import _corpus, build_tiny_model

    cfg = load_config("tiny")
    spec = {k: cfg[f"model.tiny_{k}"] for k in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "seed")}
    model_dir = root / "models" / "tiny"
    build_tiny_model(model_dir, **spec, corpus=_corpus(300))   # a small corpus keeps the tokenizer fast
    atomic_write_json(model_dir / "build.json", spec)           # what rcea.tiny.ensure_tiny_model checks
    write_manifest(model_dir / "build.json", seeds={"model": spec["seed"]})

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
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
    return tiny_data_template / "models" / "tiny"


def subprocess_env(data_root) -> dict:
    """Environment for `python -m infer ...` subprocesses: the data folder and the project on the path."""
    from rcea.paths import project_root

    env = dict(os.environ, RCEA_DATA=str(data_root), PYTHONPATH=str(project_root()))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env
