"""The vLLM backend's arguments, built without vLLM (tests/contract feeds them to the real classes)."""

import os
import time

import pytest

from infer.backends.vllm_args import (AdapterIds, adapter_key, engine_kwargs, lora_request_kwargs, max_lora_rank,
                                      sampling_kwargs)
from rcea.config import ConfigError, load_config


def test_float32_lora_engine_is_refused_before_vllm_is_imported():
    with pytest.raises(ValueError, match="bfloat16"):
        engine_kwargs("m", 32, dtype="float32")
    from infer.backends.vllm_backend import VLLMBackend

    with pytest.raises(ValueError, match="LoRA kernels"):   # raised here, on CPU, not at the first generate
        VLLMBackend("no-such-model", dtype="float32")
    assert engine_kwargs("m", 32)["dtype"] == "bfloat16"
    assert engine_kwargs("m", 32, dtype="float16")["dtype"] == "float16"


def test_engine_asks_for_processed_logprobs_and_pins_the_revision():
    kw = engine_kwargs("Qwen/Qwen2.5-3B", 32, revision="abc123")
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert kw["revision"] == kw["tokenizer_revision"] == "abc123"
    assert kw["enable_lora"] is True and kw["max_lora_rank"] == 32
    assert "revision" not in engine_kwargs("m", 32)


@pytest.mark.parametrize("rank, served", [(1, 1), (2, 8), (8, 8), (9, 16), (32, 32), (33, 64), (300, 320), (512, 512)])
def test_max_lora_rank_is_the_smallest_accepted_rank_at_least_the_adapters(rank, served):
    assert max_lora_rank(rank) == served


def test_ranks_vllm_cannot_serve_are_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="320, 512"):
        max_lora_rank(513)
    with pytest.raises(ValueError, match="positive"):
        max_lora_rank(0)
    with pytest.raises(ValueError, match="not one vLLM 0.23 accepts"):
        engine_kwargs("m", 24)
    assert max_lora_rank(1, "0.11") == 8     # vLLM 0.11 has no rank 1


def test_config_refuses_an_unservable_lora_rank_at_load_time():
    assert load_config("tiny", None, ["train.lora_rank=64"])["train.lora_rank"] == 64
    with pytest.raises(ConfigError, match="largest LoRA rank"):
        load_config("tiny", None, ["train.lora_rank=1024"])


def test_sampling_kwargs():
    g = sampling_kwargs(True, 12, [2, 5])
    assert g == dict(temperature=0.0, max_tokens=12, logprobs=0, stop_token_ids=[2, 5])
    s = sampling_kwargs(False, 12, [2], temperature=0.7, top_p=0.95, seed=7)
    assert (s["seed"], s["temperature"], s["top_p"], s["logprobs"]) == (7, 0.7, 0.95, 0)
    with pytest.raises(ValueError, match="seed"):
        sampling_kwargs(False, 12, [2])


def _adapter(path, payload=b"w"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text("{}")
    (path / "adapter_model.safetensors").write_bytes(payload)
    return path


def test_adapter_ids_are_stable_and_never_shared(tmp_path):
    a = _adapter(tmp_path / "grpo/checkpoints/checkpoint-50")
    b = _adapter(tmp_path / "grpo/checkpoints/checkpoint-100")
    c = _adapter(tmp_path / "dapo/checkpoints/checkpoint-50")
    ids = AdapterIds()
    reqs = [lora_request_kwargs(p, ids) for p in (a, b, c)]
    assert len({r["lora_int_id"] for r in reqs}) == 3 and len({r["lora_name"] for r in reqs}) == 3
    assert all(1 <= r["lora_int_id"] < 2**31 for r in reqs)
    assert lora_request_kwargs(a, ids) == reqs[0]                       # same adapter, same id
    assert lora_request_kwargs(a, AdapterIds()) == reqs[0]              # stable across processes (a hash)
    assert reqs[0]["lora_path"] == str(a.resolve())


def test_a_checkpoint_rewritten_in_place_gets_a_new_id(tmp_path):
    a = _adapter(tmp_path / "checkpoint-50", b"first")
    ids = AdapterIds()
    first = lora_request_kwargs(a, ids)["lora_int_id"]
    (a / "adapter_model.safetensors").write_bytes(b"second run")       # a rerun rewrote the weights
    later = time.time_ns() + 10**9
    os.utime(a / "adapter_model.safetensors", ns=(later, later))
    assert lora_request_kwargs(a, ids)["lora_int_id"] != first


def test_a_hash_collision_takes_the_next_free_id(monkeypatch):
    monkeypatch.setattr(AdapterIds, "hashed", staticmethod(lambda key: 7))
    ids = AdapterIds()
    assert [ids.get("x"), ids.get("y"), ids.get("x"), ids.get("z")] == [7, 8, 7, 9]


def test_not_an_adapter_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        lora_request_kwargs(tmp_path, AdapterIds())
    assert adapter_key(_adapter(tmp_path / "x")).startswith(str((tmp_path / "x").resolve()))


def test_reproducible_env_sets_what_vllm_documents_unless_the_user_chose():
    from infer.backends.vllm_args import REPRODUCIBLE_ENV, reproducible_env

    env: dict = {}
    assert reproducible_env(env) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_BATCH_INVARIANT": "1"} == env
    assert REPRODUCIBLE_ENV == env
    mine = {"VLLM_BATCH_INVARIANT": "0", "OTHER": "x"}          # an explicit choice stays
    assert reproducible_env(mine) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_BATCH_INVARIANT": "0"}
    assert mine["OTHER"] == "x"
