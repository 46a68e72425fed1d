"""vLLM's CPU build cannot sleep, so a CPU worker must not ask for it (infer.worker.placement decides from the
device): the CPU engine keeps today's arguments, with measure.one_weight_copy on as in the paper's settings."""

from __future__ import annotations


def test_the_cpu_platform_has_no_sleep_mode_and_the_cpu_worker_asks_for_none():
    from vllm.platforms import current_platform

    from infer.worker import placement
    from rcea.config import load_config

    assert current_platform.device_type == "cpu" and not current_platform.is_sleep_mode_available()
    cfg = load_config("tiny")
    assert cfg["measure.one_weight_copy"]
    got = placement(cfg, "cpu", "vllm")
    assert got == {"one_copy": False, "scorer_device": "cpu", "scorer_dtype": "auto",
                   "engine": {"enforce_eager": True}}
    assert placement(cfg, "cuda:0", "vllm")["engine"]["enable_sleep_mode"] is True   # what the CPU must not get
