"""Issue 32: an outside run's checkpoint folder (PEFT adapters and full model folders, steps in names or in
trainer_state.json) is found, checked against the base, imported as its own run and planned with the study's
kinds; a checkpoint of another architecture is refused in one line before anything is written or queued."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infer.outside import find_checkpoints, main


@pytest.fixture
def outside(tiny_data, tiny_model_dir, tmp_path):
    """A TRL-like output folder: an adapter named checkpoint-2, a verl-like global_step_3/actor/huggingface
    adapter, a full (merged) model folder whose step is only in its trainer_state.json, and a steps.jsonl."""
    src = tiny_data / "train" / "tiny" / "grpo" / "checkpoints"
    run = tmp_path / "their-run"
    for name, step in (("checkpoint-2", 2), ("global_step_3/actor/huggingface", 4)):
        dst = run / name
        dst.mkdir(parents=True)
        for p in (src / f"checkpoint-{step}").glob("adapter_*"):
            shutil.copy2(p, dst / p.name)
    shutil.copytree(tiny_model_dir, run / "merged")
    (run / "merged" / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    (run / "steps.jsonl").write_text("".join(json.dumps({"step": s, "entropy": 1.0 / s, "reward": 0.1 * s}) + "\n"
                                             for s in (1, 2, 3, 4, 5)))
    return run


def test_finds_each_checkpoint_with_its_step_and_form(outside):
    found = find_checkpoints(outside)
    assert [(f.step, f.form, f.step_from) for f in found] == [
        (2, "adapter", "name"), (3, "adapter", "name"), (5, "full", "trainer_state.json")]


def test_imports_and_plans_the_outside_run_as_its_own_rows(outside, tiny_model_dir, tiny_data, capsys):
    from infer.queue import Queue
    from rcea.layout import state_path
    from rcea.store import checkpoint_complete
    from tests.infer.tiny_run import tiny_overrides

    args = [str(outside), "--base", str(tiny_model_dir), "--name", "their-run"]
    args += [a for o in tiny_overrides() for a in ("--override", o)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trainer_state.json" in out and "not measured" not in out and "queued" in out
    run = tiny_data / "train" / "tiny" / "their-run"
    assert [checkpoint_complete(run / "checkpoints" / f"checkpoint-{s}") for s in (2, 3, 5)] == [True] * 3
    full = run / "checkpoints" / "checkpoint-5"   # the full model's config and weights, not its tokenizer
    assert (full / "config.json").exists() and (full / "model.safetensors").exists()
    assert not list(full.glob("tokenizer*")) and not (full / "adapter_config.json").exists()
    assert (run / "steps.jsonl").read_text() == (outside / "steps.jsonl").read_text()
    jobs = Queue(state_path("tiny")).jobs()
    payloads = [json.loads(j["payload"]) if isinstance(j["payload"], str) else j["payload"] for j in jobs]
    ours = [(j, p) for j, p in zip(jobs, payloads) if p["method"] == "their-run"]
    assert ours and {p["step"] for _, p in ours} <= {2, 3, 5} and 5 in {p["step"] for _, p in ours}
    assert {j["kind"] for j, _ in ours} >= {"probe", "greedy", "passk"}
    for _, p in ours:   # the full model is named as `model`, never as an adapter; adapters' payloads as before
        if p["step"] == 5:
            assert p["model"] == "train/tiny/their-run/checkpoints/checkpoint-5" and p["adapter"] is None
        else:
            assert "model" not in p and p["adapter"] == f"train/tiny/their-run/checkpoints/checkpoint-{p['step']}"
    assert main(args) == 0   # again: nothing new (idempotent)
    assert len(Queue(state_path("tiny")).jobs()) == len(jobs)


def _other_architecture(folder):
    from rcea.tiny import build_tiny_model

    return build_tiny_model(folder, layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, vocab=300)


@pytest.mark.parametrize("form", ["full", "adapter", "tokenizer"])
def test_another_architecture_is_refused_in_one_line_before_any_job(outside, tiny_model_dir, tiny_data, capsys,
                                                                    form):
    if form == "tokenizer":   # the base's adapter, saved with another vocabulary's tokenizer
        from rcea.tiny import build_tokenizer

        shutil.copytree(outside / "checkpoint-2", outside / "checkpoint-7")
        build_tokenizer(300).save_pretrained(outside / "checkpoint-7")
    else:
        other = _other_architecture(outside / "checkpoint-7")
    if form == "adapter":   # a LoRA adapter of the other model, in place of the model itself
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        model = get_peft_model(AutoModelForCausalLM.from_pretrained(other),
                               LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
        shutil.rmtree(other)
        model.save_pretrained(other)
    capsys.readouterr()   # the folder's build output
    rc = main([str(outside), "--base", str(tiny_model_dir), "--name", "their-run"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "checkpoint-7" in err and "step 7" in err and "--base" in err and "Traceback" not in err
    assert not (tiny_data / "train" / "tiny" / "their-run").exists()
    from rcea.layout import state_path
    assert not state_path("tiny").exists()


def test_a_study_method_name_is_refused(outside, tiny_model_dir, capsys):
    assert main([str(outside), "--base", str(tiny_model_dir), "--name", "grpo", "--check-only"]) == 2
    assert "--name 'grpo'" in capsys.readouterr().err


def test_the_base_defaults_to_the_scales_base_policy(outside, tiny_data, capsys):
    from tests.infer.tiny_run import tiny_overrides

    args = [str(outside), "--name", "their-run", "--check-only", *(a for o in tiny_overrides() for a in ("--override", o))]
    assert main(args) == 0
    assert "checkpoint-2" in capsys.readouterr().out
    _other_architecture(outside / "checkpoint-7")
    capsys.readouterr()
    assert main(args) == 2 and f"base model {tiny_data / 'models' / 'tiny-toy'}:" in capsys.readouterr().err


# ----------------------------------------------------------------- full model folders are measured
def _merged(adapter, base, out):
    """The PEFT adapter folder `adapter` merged into its base and saved as a full model folder (no tokenizer:
    the engines fall back to the base's)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload().save_pretrained(out)
    return out


def test_full_model_jobs_group_and_write_apart_from_the_base_and_each_other():
    from orchestrate.units import MeasureUnit
    from rcea.layout import job_parts

    common = {"scale": "tiny", "overrides": [], "config_hash": "h", "kind": "greedy", "tables": ["greedy"]}
    units = [MeasureUnit(f"greedy:{m}-{s}", "greedy", {**common, "method": m, "step": s, **ck})
             for m, s, ck in (("base", 0, {"adapter": None}),
                              ("r", 3, {"adapter": None, "model": "train/tiny/r/checkpoints/checkpoint-3"}),
                              ("r", 4, {"adapter": None, "model": "train/tiny/r/checkpoints/checkpoint-4"}),
                              ("r", 2, {"adapter": "train/tiny/r/checkpoints/checkpoint-2"}))]
    assert len({u.group for u in units}) == 4 and len({u.key for u in units}) == 4
    assert "checkpoint-3" in units[1].group
    assert len({p for u in units for p in job_parts(u.kind, u.payload, "/d")}) == 4


def test_a_merged_full_model_measures_as_its_adapter_over_the_base(tiny_data, tiny_model_dir, tmp_path, capsys):
    """The oracle: a full folder that is the merge of an adapter gives the adapter's rows (probe samples and
    token statistics, greedy answers, pass@k, the covariance prediction), through the same jobs on one worker."""
    import numpy as np
    import pandas as pd

    from infer.jobs import run_job
    from infer.queue import Queue
    from infer.worker import Context
    from rcea.layout import state_path, tables_dir
    from tests.infer.tiny_run import tiny_overrides

    adapter = tiny_data / "train" / "tiny" / "grpo" / "checkpoints" / "checkpoint-2"
    _merged(adapter, tiny_model_dir, tmp_path / "their-run" / "checkpoint-2")
    assert main([str(tmp_path / "their-run"), "--base", str(tiny_model_dir), "--name", "their-run",
                 *(a for o in tiny_overrides() for a in ("--override", o))]) == 0
    assert "full" in capsys.readouterr().out
    jobs = [(j["kind"], json.loads(j["payload"])) for j in Queue(state_path("tiny")).jobs()]
    jobs = [(k, p) for k, p in jobs if p["method"] == "their-run"]
    assert {k for k, _ in jobs} == {"probe", "greedy", "passk", "covariance"}
    ctx = Context("cpu", "hf")
    for _, p in jobs:   # the full model's jobs, then the adapter's on the same engines (they switch back and forth)
        assert p["model"] == "train/tiny/their-run/checkpoints/checkpoint-2" and p["adapter"] is None
        assert "skipped" not in run_job(p, ctx, lambda *a: None)
        theirs = {**{k: v for k, v in p.items() if k != "model"}, "method": "grpo",
                  "adapter": adapter.relative_to(tiny_data).as_posix(), **({"run_method": "grpo"} if "run_method" in p else {})}
        assert "skipped" not in run_job(theirs, ctx, lambda *a: None)
        assert ctx._scorer.model is ctx._scorer._base   # the adapter's job ran over the base, not the full model

    def part(table, kind, method):
        df = pd.read_parquet(tables_dir("tiny") / table / f"{kind}-{method}-2.parquet")
        return df.drop(columns=["method"]).reset_index(drop=True)

    for table, kind, exact in (("samples", "probe", ["question_id", "sample", "n_tokens", "reward", "completion"]),
                               ("tokens", "probe", ["question_id", "sample", "position", "token_id"]),
                               ("greedy", "greedy", ["question_id", "correct", "n_tokens", "truncated"]),
                               ("passk", "passk", ["question_id", "n", "c"])):
        full, lora = part(table, kind, "their-run"), part(table, kind, "grpo")
        assert len(full) > 0 and full[exact].equals(lora[exact]), table
        for col in {"tokens": ["logprob", "entropy"], "samples": ["logprob_sum", "token_entropy_mean"]}.get(table, []):
            np.testing.assert_allclose(full[col], lora[col], atol=1e-4)
    full, lora = part("covariance", "covariance", "their-run"), part("covariance", "covariance", "grpo")
    assert full["n_positions"].iloc[0] == lora["n_positions"].iloc[0] > 0
    np.testing.assert_allclose(full[["predicted_delta", "observed_delta"]], lora[["predicted_delta", "observed_delta"]],
                               atol=1e-4)


def test_covariance_between_two_full_models_is_that_between_their_adapters(tiny_data, tiny_model_dir, tmp_path,
                                                                             capsys, monkeypatch):
    """Both checkpoints of a transition full models (the later one loaded once, after all prefixes are scored
    under the earlier one): the prediction and observation of the two adapters they merge."""
    import numpy as np
    import pandas as pd

    from infer.jobs import run_job
    from infer.queue import Queue
    from infer.worker import Context
    from rcea.layout import state_path, tables_dir
    from tests.infer.tiny_run import tiny_overrides

    ckpts = tiny_data / "train" / "tiny" / "grpo" / "checkpoints"
    for step in (2, 4):
        _merged(ckpts / f"checkpoint-{step}", tiny_model_dir, tmp_path / "their-run" / f"checkpoint-{step}")
    assert main([str(tmp_path / "their-run"), "--base", str(tiny_model_dir), "--name", "their-run",
                 *(a for o in tiny_overrides() for a in ("--override", o))]) == 0
    capsys.readouterr()
    [p] = [json.loads(j["payload"]) for j in Queue(state_path("tiny")).jobs()
           if j["kind"] == "covariance" and json.loads(j["payload"])["step"] == 4]
    assert p["step_from"] == 2 and p["model_from"].endswith("checkpoint-2") and p["model"].endswith("checkpoint-4")
    from transformers import AutoModelForCausalLM

    loads, real = [], AutoModelForCausalLM.from_pretrained.__func__
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        classmethod(lambda cls, path, **kw: loads.append(Path(path).name) or real(cls, path, **kw)))
    ctx = Context("cpu", "hf")
    run_job(p, ctx, lambda *a: None)
    assert loads[1:] == ["checkpoint-2", "checkpoint-4"]   # the base, then each full model once (2 questions)
    lora = {k: v for k, v in p.items() if k not in ("model", "model_from")}
    run_job({**lora, "method": "grpo", "run_method": "grpo", "adapter": "train/tiny/grpo/checkpoints/checkpoint-4",
             "adapter_from": "train/tiny/grpo/checkpoints/checkpoint-2"}, ctx, lambda *a: None)
    full, ours = (pd.read_parquet(tables_dir("tiny") / "covariance" / f"covariance-{m}-4.parquet")
                  for m in ("their-run", "grpo"))
    assert full["n_positions"].iloc[0] == ours["n_positions"].iloc[0] > 0
    assert full["observed_delta"].abs().iloc[0] > 1e-4   # two different models: a real change to compare
    np.testing.assert_allclose(full[["predicted_delta", "observed_delta"]], ours[["predicted_delta", "observed_delta"]],
                               atol=1e-4)


def test_hf_backend_switches_between_a_full_model_the_base_and_adapters(tiny_data, tiny_model_dir, tmp_path):
    import numpy as np

    from infer.backends import get_backend

    adapter = tiny_data / "train" / "tiny" / "grpo" / "checkpoints" / "checkpoint-4"
    merged = _merged(adapter, tiny_model_dir, tmp_path / "merged")
    be = get_backend("hf", str(tiny_model_dir))
    prompt, completion = [[5, 9, 13, 2]], [[7, 11, 3, 8, 21]]

    def lp():
        return be.score(prompt, completion)[0].logprob

    base = lp()
    be.set_model(str(merged))
    full = lp()
    be.set_adapter(str(adapter))
    lora = lp()
    be.set_model(None)
    again = lp()
    assert not np.allclose(full, base, atol=1e-4)
    np.testing.assert_allclose(full, lora, atol=1e-4)
    np.testing.assert_array_equal(again, base)
    be.set_model(str(merged))
    held = be._full[1]
    be.set_adapter(None)
    be.set_model(str(merged))   # the same folder again: the loaded model, not a second load
    assert be._full[1] is held and be.model is held and be.model_folder == str(merged) and be.adapter is None


def test_vllm_backend_holds_one_engine_keyed_by_its_model_folder(tiny_model_dir, tmp_path, monkeypatch):
    """Without vLLM: a stand-in `vllm` module records the engines the backend starts and shuts down."""
    import sys
    import types

    from transformers import AutoTokenizer

    from infer.backends.vllm_args import full_model_kwargs

    events = []

    class Core:
        def __init__(self, model):
            self.model = model

        def shutdown(self):
            events.append(("stop", self.model))

    class LLM:
        def __init__(self, **kw):
            events.append(("start", kw["model"], kw.get("tokenizer"), kw.get("enable_lora", False)))
            self.llm_engine = types.SimpleNamespace(engine_core=Core(kw["model"]), model_config=types.SimpleNamespace(
                get_vocab_size=lambda: 512))

        def get_tokenizer(self):
            return AutoTokenizer.from_pretrained(tiny_model_dir)

    fake = types.ModuleType("vllm")
    fake.LLM = LLM
    dist = types.ModuleType("vllm.distributed")
    dist.cleanup_dist_env_and_memory = lambda: events.append(("cleanup",))
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.distributed", dist)
    monkeypatch.setitem(sys.modules, "vllm.lora", types.ModuleType("vllm.lora"))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    from infer.backends.vllm_backend import VLLMBackend

    one, two = (shutil.copytree(tiny_model_dir, tmp_path / n) for n in ("checkpoint-3", "checkpoint-4"))
    be = VLLMBackend(str(tiny_model_dir), max_lora_rank=8)
    be.set_model(str(one))
    be.set_model(str(one))   # held: no second start
    assert be._lora is None
    be.set_model(str(two))
    be.set_adapter(None)
    base = str(tiny_model_dir)
    assert events == [("start", base, None, True),
                      ("stop", base), ("cleanup",), ("start", str(one.resolve()), base, False),
                      ("stop", str(one.resolve())), ("cleanup",), ("start", str(two.resolve()), base, False),
                      ("stop", str(two.resolve())), ("cleanup",), ("start", base, None, True)]
    kw = full_model_kwargs({"model": "org/base", "revision": "abc", "tokenizer_revision": "abc", "enable_lora": True,
                            "max_lora_rank": 8, "max_loras": 2, "dtype": "bfloat16"}, one)
    assert kw == {"model": str(one.resolve()), "tokenizer": "org/base", "tokenizer_revision": "abc", "dtype": "bfloat16"}
