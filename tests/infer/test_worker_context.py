"""The measurement worker's vLLM engine is sized by the settings: `data.context_tokens` for the prompt plus the
longest generation budget (it was a literal 2048 beside a setting nothing read)."""

from __future__ import annotations

from rcea.config import load_config


def test_the_vllm_context_is_data_context_tokens_plus_the_longest_budget(monkeypatch):
    import infer.backends
    import infer.worker as worker

    made = []

    class Fake:
        tokenizer = object()

    def get_backend(kind, path, **kw):
        made.append((kind, kw))
        return Fake()

    monkeypatch.setattr(infer.backends, "get_backend", get_backend)
    monkeypatch.setattr(worker, "resolve_model", lambda cfg: "a-model")
    for context in (2048, 1000):
        made.clear()
        cfg = load_config("3b", None, [f"data.context_tokens={context}", "probe.max_new_tokens=3000"])
        worker.Context("cuda:0", "vllm").backends(cfg)
        (vllm,) = [kw for kind, kw in made if kind == "vllm"]
        assert vllm["max_model_len"] == context + 3000
