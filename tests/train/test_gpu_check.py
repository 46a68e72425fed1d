"""train.gpu_check: real GRPO steps through ObjectiveGRPOTrainer on the tiny shape on CPU (its GPU twin runs the
3B and 7B shapes with colocated vLLM), its rollout-weights verdict on the GPU code path driven by a recording
stand-in for the vLLM engine, its verdict arithmetic by hand, and its refusals."""

import re

import pytest
import torch

from rcea.device_check import SHAPES, lora_params, run_part
from tests.train.vllm_standin import install
from train import gpu_check

SMALL = ("train.per_device_batch=16",)  # 2 prompts x 8: the stand-in engine samples one token per forward
VLLM = SMALL + ("train.use_vllm=true",)
SLEEP = VLLM + ("train.vllm_enable_sleep_mode=true",)


def lines(out: str) -> dict[str, str]:
    """check name -> its PASS/FAIL verdict; each check printed exactly once."""
    found = re.findall(r"^(PASS|FAIL) (\S+): ", out, re.M)
    names = [n for _, n in found]
    assert len(names) == len(set(names)), out
    return {n: v for v, n in found}


def test_cpu_check_runs_grpo_steps(capsys):
    assert gpu_check.main(["--cpu"]) == 0
    out = capsys.readouterr().out
    # tiny shape: 2 layers, hidden 64, MLP 128, kv width 2 x 16 = 32; the tiny scale's rank 8
    per_layer = (64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64)
    assert lora_params("tiny", 8) == 8 * per_layer * 2 == 16_384
    assert lines(out) == {"grpo-steps-tiny": "PASS", "memory-tiny": "PASS", "rollout-weights-tiny": "PASS",
                          "base-weights-tiny": "PASS", "stop-tokens-tiny": "PASS"}, out
    assert re.search(r"PASS base-weights-tiny: 0 of [\d,]+ frozen base weights changed", out), out
    assert re.search(r"PASS stop-tokens-tiny: \d+ of 64 rollout completions", out), out
    assert "2 of 2 steps" in out and "trainable 16,384 (by hand 16,384)" in out and "sampler TRL generate" in out
    assert "the sampler gap needs vLLM (GPU): not measured here" in out
    assert re.search(r"^GPU CHECK PASSED \(\d+ s\)$", out, re.M) and "{'loss'" not in out  # no raw Trainer dicts


def test_lora_parameter_count_by_hand():
    # Qwen2.5-3B: h 2048, MLP 11008, kv 2 x 128 = 256, 36 layers, r 32
    per_layer = (2048 + 2048) + 2 * (2048 + 256) + (2048 + 2048) + 2 * (2048 + 11008) + (11008 + 2048)
    assert lora_params("3b", 32) == 32 * per_layer * 36 == 59_867_136
    assert SHAPES["7b"]["hidden_size"] // SHAPES["7b"]["num_attention_heads"] == 128


def test_random_models_keep_rope_in_fp32_as_a_loaded_checkpoint_does(tmp_path):
    """bf16 RoPE frequencies would make the policy's log-probs differ from vLLM's (fp32 RoPE) by more than
    bf16 weights do, and the rollout-weights check would read that as sampler noise."""
    from transformers import AutoModelForCausalLM

    from rcea.device_check import random_model

    random_model("tiny").save_pretrained(tmp_path)
    loaded = dict(AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).named_buffers())
    for model in (random_model("tiny", torch.bfloat16), gpu_check._build_model("tiny", torch.bfloat16, "cpu")):
        (name, freq), = [(n, b) for n, b in model.named_buffers() if n.endswith("inv_freq")]
        assert freq.dtype == loaded[name].dtype == torch.float32 and torch.equal(freq, loaded[name])
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_weights_verdict_by_hand():
    assert gpu_check.weights_verdict(0.02, 0.021, 0.30)[0]                 # gap unchanged: fresh weights
    assert gpu_check.weights_verdict(0.02, 0.16, 0.30)[0]                  # grew by under half the move: fresh
    ok, detail = gpu_check.weights_verdict(0.02, 0.31, 0.30)                # grew by the move: stale
    assert not ok and "STALE" in detail
    ok, detail = gpu_check.weights_verdict(0.02, 0.02, 0.03)                # move within the noise: cannot tell
    assert not ok and "raise --lr" in detail


def test_a_policy_that_does_not_move_fails():
    res = gpu_check.part_grpo("tiny", "cpu", 2, 1e-9, 16, 8, overrides=SMALL)
    line = {c["check"]: c for c in res["checks"]}["rollout-weights-tiny"]
    assert line["ok"] is False and "raise --lr" in line["detail"]


@pytest.mark.parametrize("guarded", [True, False])
def test_rollout_weights_check_with_a_stand_in_sleep_mode_engine(guarded, monkeypatch):
    """The GPU code path (colocated vLLM, sleep mode as at 7B) driven on CPU with the recording stand-in for
    vLLM 0.11: PASS with train/vllm_sync.py, FAIL with TRL 0.29.0 alone (rollouts from the checkpoint). The
    stand-in also says which weights each rollout came from, independently of the check's own numbers."""
    engine_cls = install(monkeypatch)
    if not guarded:
        monkeypatch.setattr("train.trainer.use_policy_weights", lambda trainer: None)
    seen = []
    disk = {}

    def record(engine_model):
        if not disk:  # the first rollout: the engine holds the checkpoint the policy starts from
            disk.update({k: v.clone() for k, v in engine_model.state_dict().items()})
        seen.append(max(float((v - disk[k]).abs().max()) for k, v in engine_model.state_dict().items()))

    engine_cls.on_generate = record
    res = gpu_check.part_grpo("tiny", "cpu", 2, 1e-2, 16, 8, overrides=SLEEP)
    assert res["sampler"] == "vLLM colocated, sleep mode" and engine_cls.instances[0].sleep_mode
    assert len(seen) == 2 and seen[0] == 0.0
    assert (seen[1] > 1e-3) is guarded, seen  # the second rollout: updated weights only with the fix
    line = {c["check"]: c for c in res["checks"]}["rollout-weights-tiny"]
    assert line["ok"] is guarded, line["detail"]
    assert ("STALE" in line["detail"]) is not guarded
    gaps = [float(x) for x in re.findall(r"gap (\d\.\d+) before any update, (\d\.\d+) after", line["detail"])[0]]
    moved = float(re.search(r"moved (\d\.\d+)", line["detail"]).group(1))
    assert gaps[0] < 1e-3 and moved > 1e-2  # fp32 engine, fp32 policy: no noise before the update
    assert (gaps[1] < 1e-3) is guarded and (abs(gaps[1] - moved) < 0.5 * moved) is not guarded
    stop = {c["check"]: c for c in res["checks"]}["stop-tokens-tiny"]  # the stand-in honours stop_token_ids
    assert stop["ok"] and re.search(r"caught with probability 0\.99\d\d", stop["detail"]), stop["detail"]


def test_stop_check_power_by_hand():
    from train.gpu_measure import stop_power, stop_rate_for

    # 3 tokens, 2 completions; per token: the raised stop 0.2, EOS 0.1, anything else 0.7. A completion shows a
    # run-on when the stop comes at position 0 or 1 (the last position is a legal end): 0.2 + 0.7 x 0.2 = 0.34
    assert stop_power(0.2, 0.1, 3, 2) == pytest.approx(1 - (1 - 0.34) ** 2)
    # the random head of 3B as the issue counts it: one id per 151,936 for <|im_end|> and for EOS, 32
    # completions of 2,048 tokens: 2.7% of completions hold some stop id, 58% of 32 hold one somewhere, but a
    # sampler ignoring the stop set still stops at EOS, so only <|im_end|> first shows it: half of those
    v = 151_936
    any_stop = 1 - (1 - 2 / v) ** 2048
    assert any_stop == pytest.approx(0.0266, abs=1e-4) and 1 - (1 - any_stop) ** 32 == pytest.approx(0.578, abs=1e-3)
    one = 0.5 * (1 - (1 - 2 / v) ** 2047)
    assert stop_power(1 / v, 1 / v, 2048, 32) == pytest.approx(1 - (1 - one) ** 32) == pytest.approx(0.348, abs=1e-3)
    rate = stop_rate_for(0.99, 1 / v, 2048, 32)  # the smallest rate with power 0.99: ~ ln(100) / (32 x 2,047)
    assert stop_power(rate, 1 / v, 2048, 32) >= 0.99 > stop_power(rate * 0.999, 1 / v, 2048, 32)
    assert rate == pytest.approx(4.6052 / (32 * 2047), rel=0.03)
    with pytest.raises(ValueError, match="0 < power < 1"):
        stop_rate_for(1.0, 1 / v, 2048, 32)


def test_raised_head_row_samples_the_stop_id_at_its_rate():
    """The tiny model, tied head as 3B: <|im_end|> (id 4) at the asked rate on ids it was not tuned on, while
    EOS (id 2) keeps a random head's 1 / vocab and no other id dominates."""
    from rcea.device_check import random_model
    from train.gpu_measure import raise_stop_row

    model = random_model("tiny")
    ids = torch.randint(5, 4096, (8, 64), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        before = torch.softmax(model(ids).logits, -1)
        got = raise_stop_row(model, 4, 2, lambda eos: 0.01)
        measured = got["measured"]
        after = torch.softmax(model(ids).logits, -1)
    assert float(before[..., 4].mean()) < 1e-3                   # a random head: about 1 / 4096
    assert 0.006 < measured < 0.015 and 0.006 < float(after[..., 4].mean()) < 0.015
    assert 0.5 / 4096 < float(after[..., 2].mean()) < 2 / 4096 and float(after.max()) < 0.2
    assert got["rate"] == 0.01 and got["eos"] == pytest.approx(float(after[..., 2].mean()), rel=0.5)


def test_stop_check_catches_a_sampler_that_ignores_the_stop_set(monkeypatch):
    """The stand-in engine stripped of `stop_token_ids` stops at EOS only, as vLLM does when the stop set does
    not reach it: the raised <|im_end|> makes 32 completions of 8 tokens show the run-on (an unraised random
    head samples it about 32 x 7 / 4,096 = 0.05 times: the check passed such a sampler 95% of the time)."""
    import trl.generation.vllm_generation as vg

    from tests.train.vllm_standin import SamplingParams

    install(monkeypatch)

    class IgnoresStops(SamplingParams):
        def __init__(self, **kwargs):
            kwargs.pop("stop_token_ids", None)
            super().__init__(**kwargs)

    monkeypatch.setattr(vg, "SamplingParams", IgnoresStops)
    res = gpu_check.part_grpo("tiny", "cpu", 2, 1e-2, 16, 8, overrides=VLLM)
    line = {c["check"]: c for c in res["checks"]}["stop-tokens-tiny"]
    assert line["ok"] is False and "THE SAMPLER IGNORES THE STOP SET" in line["detail"], line["detail"]


def test_a_crash_is_one_fail_line_and_the_rest_still_runs(monkeypatch, capsys):
    def broken(*a, **k):
        raise RuntimeError("CUDA out of memory (stand-in)")

    monkeypatch.setattr(gpu_check, "part_grpo", broken)
    assert gpu_check.main(["--cpu"]) == 1
    out = capsys.readouterr().out
    assert lines(out) == {"grpo-steps-tiny": "FAIL"} and "CUDA out of memory (stand-in)" in out
    assert "GPU CHECK FAILED" in out


def test_a_child_process_result_is_found_after_engine_output_and_a_hang_is_a_fail(tmp_path, monkeypatch):
    """The GPU path runs each scale in `python -m <module> --_part`: engines log to stdout after or before the
    JSON line; a child that hangs is stopped at the timeout."""
    (tmp_path / "fakecheck.py").write_text(
        "import json, sys, time\n"
        "if sys.argv[2] == 'hang':\n    time.sleep(60)\n"
        "print('INFO engine starting')\nprint(json.dumps({'check': 'x', 'ok': True, 'detail': 'd'}))\n"
        "print('INFO destroying process group')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert run_part("fakecheck", ["ok", "cuda"], None, timeout=30) == {"check": "x", "ok": True, "detail": "d"}
    res = run_part("fakecheck", ["hang", "cuda"], None, timeout=2)
    assert res["ok"] is False and "still running after 2 s" in res["detail"]


@pytest.mark.parametrize("argv, says", [
    (["--cpu", "--steps", "1"], "at least 2 steps"),
    (["--shapes", "13b"], "unknown scale 13b"),
    (["--shapes", "tiny"], "unknown scale tiny"),
    (["--cpu", "--lr", "0"], "must be positive"),
    (["--shapes", "7b", "--completion", "4096"], "vllm_max_model_length"),
])
def test_bad_arguments_are_refused_with_the_fix(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        gpu_check.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert says in err and err.strip().splitlines()[-1].startswith("python -m train.gpu_check: error:")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the real check would run")
def test_without_a_gpu_it_says_what_to_run(capsys):
    assert gpu_check.main(["--shapes", "3b"]) == 2
    assert "--cpu" in capsys.readouterr().out


def test_no_test_folder_passes_for_the_vllm_package():
    """tests/vllm must not be importable as `vllm` here (tests/conftest.py): TRL would read vLLM as installed."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    assert spec is None or spec.origin is not None, spec


def test_prediction_table_by_hand():
    from rcea.device_check import prediction_table

    lines = prediction_table({"3b step": (50.0, 10.0), "engine": (20.0, None)},
                             {"3b step": (55.0, 25.0), "probe": (2.0, 3.0)})
    assert lines == [
        "stage    GiB pred  GiB meas  ratio   s pred   s meas  ratio",
        "3b step      50.0      55.0   1.10     10.0     25.0   2.50",
        "engine       20.0         -      -        -        -      -",
        "probe           -       2.0      -        -      3.0      -",
    ]


def test_predicted_step_reads_the_planners_training_stage(monkeypatch):
    """A stand-in plan result: device peak and seconds per step (hours x 3600 / steps) as the stage says, and
    PyTorch's allocated peak = the update pass's GiB less the engine (awake) and the CUDA context."""
    import train.plan
    from train import gpu_measure as gm
    from train.envelope import Stage
    from train.plan_data import assume, card

    seen = {}

    def plan(scale, gpu, overrides, methods, log):
        seen.update(scale=scale, gpu=gpu, overrides=overrides, methods=methods)
        detail = {"update_gib": 58.0, "engine_gib": 19.9, "sleep": False, "steps": 2}
        return {"stages": [Stage("engine (colocated vLLM)", "train", 19.9, card(gpu), 0.0),
                           Stage("train grpo", "train", 61.0, card(gpu), 0.01, detail=detail)]}

    monkeypatch.setattr(train.plan, "plan", plan)
    got = gm.predicted_step("3b", ["train.grad_accum=1"])
    assert seen == {"scale": "3b", "gpu": "h100-80gb", "overrides": ["train.grad_accum=1"], "methods": ["grpo"]}
    assert got == {"3b grpo step, device": (61.0, pytest.approx(18.0)),
                   "3b grpo step, PyTorch allocated": (pytest.approx(58.0 - 19.9 - assume("cuda_overhead_gib")), None)}


def test_the_gpu_path_prints_predicted_against_measured(monkeypatch, capsys):
    """main() on a (stand-in) GPU host: each scale's measured peak and last step beside the planner's numbers;
    a scale that crashed still shows its prediction; a planner that fails is one line, not a FAIL."""
    from rcea import device_check
    from train import gpu_measure as gm

    monkeypatch.setattr(device_check, "gpu_present", lambda: True)
    monkeypatch.setattr(gpu_check, "_gpu_stack_missing", lambda: [])
    ran = {"3b": {"checks": [{"check": "grpo-steps-3b", "ok": True, "detail": "d"}], "sampler": "vLLM colocated",
                  "measured": {"peak_gib": 66.0, "allocated_gib": 40.0, "step_s": 36.0}},
           "7b": {"check": "7b", "ok": False, "detail": "crashed: CUDA out of memory"}}
    monkeypatch.setattr(device_check, "run_part", lambda module, args, dispatch, timeout=None: ran[args[0]])
    asked = []

    def predicted(scale, overrides):
        asked.append((scale, overrides))
        if scale == "7b":
            raise RuntimeError("stand-in planner failure")
        return {"3b grpo step, device": (60.0, 12.0), "3b grpo step, PyTorch allocated": (32.0, None)}

    monkeypatch.setattr(gm, "predicted_step", predicted)
    assert gpu_check.main(["--shapes", "3b,7b"]) == 1
    out = capsys.readouterr().out
    assert [s for s, _ in asked] == ["3b", "7b"]
    assert "train.grad_accum=1" in asked[0][1] and "train.max_steps=2" in asked[0][1]  # the check's own settings
    assert re.search(r"3b grpo step, device\s+60\.0\s+66\.0\s+1\.10\s+12\.0\s+36\.0\s+3\.00$", out, re.M), out
    assert re.search(r"3b grpo step, PyTorch allocated\s+32\.0\s+40\.0\s+1\.25\s+-\s+-\s+-$", out, re.M), out
    assert "plan 7b: the planner failed (RuntimeError: stand-in planner failure)" in out
    assert "FAIL grpo-steps-7b" in out


def test_the_cpu_check_prints_no_prediction(monkeypatch, capsys):
    """The tiny shape has no GPU stage to plan: --cpu never calls the planner."""
    from train import gpu_measure as gm

    monkeypatch.setattr(gm, "print_predictions", lambda *a: pytest.fail("the planner ran on --cpu"))
    monkeypatch.setattr(gpu_check, "part_grpo", lambda *a, **k: {"checks": [], "sampler": "TRL generate",
                                                                  "measured": {}})
    assert gpu_check.main(["--cpu"]) == 0
    assert "predicted" not in capsys.readouterr().out
