"""Issue 41 item 3: an outside run measured with `--base other --base-differs` is measured over `other`: the base is
copied into the data folder, the run's own jobs name it (`base_model`), and a worker loads it for them, then the
scale's base again for the others. The oracle: the probe's token log-probs and entropies equal those computed
directly with the run's adapter over `other`, and differ from those over the scale's base."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from infer.outside import main


def _other_base(tiny_model_dir, tmp_path, cfg) -> Path:
    """The tiny base's shape and tokenizer, other weights: the tiny model built with another seed."""
    from rcea.tiny import TINY_SHAPE, build_tiny_model, tiny_corpus, tiny_spec

    spec = tiny_spec(cfg)
    built = build_tiny_model(tmp_path / "seed-7", corpus=tiny_corpus(cfg),
                             **{**{k: spec[k] for k in TINY_SHAPE}, "seed": spec["seed"] + 7})
    other = tmp_path / "other-base"
    shutil.copytree(tiny_model_dir, other)
    for p in other.glob("*.safetensors"):
        p.unlink()
    for p in built.glob("*.safetensors"):
        shutil.copy2(p, other / p.name)
    return other


def _direct(base, adapter, rows, questions, cfg):
    """(log-probs, entropies) of the probe's completions scored with `adapter` over `base`, in `rows`' order."""
    from infer.backends import get_backend
    from infer.kinds.common import encode

    be = get_backend("hf", str(base))
    be.set_adapter(str(adapter))
    lp, ent = [], []
    for (qid, _), tok in rows:
        s = be.score([encode(be.tokenizer, questions[qid], cfg)], [tok["token_id"].tolist()])[0]
        lp.append(s.logprob)
        ent.append(s.entropy)
    return np.concatenate(lp), np.concatenate(ent)


def test_an_outside_run_with_base_differs_is_measured_over_the_base_given(tiny_data, tiny_model_dir, tmp_path,
                                                                          capsys, monkeypatch):
    import pandas as pd
    from transformers import AutoModelForCausalLM

    from infer.jobs import run_job
    from infer.outside_files import weights_sha256
    from infer.queue import Queue
    from infer.worker import Context, resolve_model
    from rcea.config import load_config
    from rcea.data import probe_questions
    from rcea.layout import state_path, tables_dir
    from tests.infer.tiny_run import tiny_overrides

    cfg = load_config("tiny", None, tiny_overrides())
    other = _other_base(tiny_model_dir, tmp_path, cfg)
    src = tiny_data / "train" / "tiny" / "grpo" / "checkpoints" / "checkpoint-2"
    (tmp_path / "their-run" / "checkpoint-2").mkdir(parents=True)
    for p in src.glob("adapter_*"):
        shutil.copy2(p, tmp_path / "their-run" / "checkpoint-2" / p.name)
    capsys.readouterr()
    assert main([str(tmp_path / "their-run"), "--base", str(other), "--name", "their-run", "--base-differs",
                 *(a for o in tiny_overrides() for a in ("--override", o))]) == 0
    assert "measured over it, not over the scale's base" in capsys.readouterr().out

    rec = json.loads((tiny_data / "train" / "tiny" / "their-run" / "outside.json").read_text())
    copy = tiny_data / rec["base_model"]
    assert rec["base_model"] == f"models/outside-base-{rec['base_weights_sha256'][:12]}"
    assert weights_sha256(copy) == weights_sha256(other) != weights_sha256(tiny_model_dir)
    jobs = [(j["kind"], json.loads(j["payload"])) for j in Queue(state_path("tiny")).jobs()]
    assert {p.get("base_model") for _, p in jobs if p["method"] == "their-run"} == {rec["base_model"]}
    assert {p.get("base_model") for _, p in jobs if p["method"] == "base"} == {None}   # shared: the scale's base
    [probe] = [p for k, p in jobs if k == "probe" and p["method"] == "their-run"]
    [greedy] = [p for k, p in jobs if k == "greedy" and p["method"] == "their-run" and p["step"] == 2]
    [base_greedy] = [p for k, p in jobs if k == "greedy" and p["method"] == "base"]

    loads, real = [], AutoModelForCausalLM.from_pretrained.__func__
    with monkeypatch.context() as m:
        m.setattr(AutoModelForCausalLM, "from_pretrained",
                  classmethod(lambda cls, path, **kw: loads.append(str(path)) or real(cls, path, **kw)))
        ctx = Context("cpu", "hf")
        for p in (probe, greedy):   # two jobs of the other base: one load
            assert "skipped" not in run_job(p, ctx, lambda *a: None)
        assert loads == [str(copy)] and ctx.model_path == str(copy)
        run_job(base_greedy, ctx, lambda *a: None)   # a job of the scale's base: that base again
        assert loads == [str(copy), resolve_model(cfg)] and ctx.model_path == resolve_model(cfg)

    tokens = pd.read_parquet(tables_dir("tiny") / "tokens" / "probe-their-run-2.parquet")
    rows = list(tokens.sort_values(["question_id", "sample", "position"]).groupby(["question_id", "sample"]))
    assert rows and sum(len(t) for _, t in rows) > 0
    questions = {q["id"]: q["problem"] for q in probe_questions(cfg)}
    adapter = tiny_data / "train" / "tiny" / "their-run" / "checkpoints" / "checkpoint-2"
    lp = np.concatenate([t["logprob"].to_numpy() for _, t in rows])
    ent = np.concatenate([t["entropy"].to_numpy() for _, t in rows])
    want_lp, want_ent = _direct(other, adapter, rows, questions, cfg)
    np.testing.assert_allclose(lp, want_lp, atol=1e-5)
    np.testing.assert_allclose(ent, want_ent, atol=1e-5)
    scale_lp, scale_ent = _direct(tiny_model_dir, adapter, rows, questions, cfg)
    # an untrained tiny model's entropies sit near ln V for either base: apart by ~1e-2 nats, 1000 x the tolerance
    assert np.abs(lp - scale_lp).max() > 1e-1 and np.abs(ent - scale_ent).max() > 1e-3
