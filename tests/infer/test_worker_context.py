"""The measurement worker's vLLM engine is sized by the settings: `data.context_tokens` for the prompt plus the
longest generation budget (it was a literal 2048 beside a setting nothing read)."""

from __future__ import annotations


def test_the_vllm_context_is_data_context_tokens_plus_the_longest_budget(built):
    for context in (2048, 1000):
        made, *_ = built("cuda:0", "vllm", [f"data.context_tokens={context}", "probe.max_new_tokens=3000"], scale="3b")
        assert made["vllm"]["max_model_len"] == context + 3000
