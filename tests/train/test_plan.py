"""The resource plan (train/plan.py, docs/plan.md): the fake-tensor measurement against real tensors and against
the logits arithmetic, the depth extrapolation, and every scale's stages on its target cards."""

from __future__ import annotations

import json

import pytest
import torch

from rcea.config import SCALES, load_config
from rcea.launch import launch
from train import fake_pass as fp
from train import plan as tp
from train import plan_cache
from train import plan_data as pd
from train.plan_data import GIB, Shape


@pytest.fixture(autouse=True)
def plain_process(fresh_accelerate):
    """Each measurement prepares its policy with its own Accelerator(mixed_precision="bf16"), as train.plan does in
    its own process: no AcceleratorState or process group of an earlier test in this area."""
    yield


@pytest.fixture(scope="module", autouse=True)
def plan_cache_folder(tmp_path_factory):
    """The plan's kept measurements in this module's own folder: every test measures what it tests (none reads
    an entry the project's .cache/plan kept from an earlier run)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RCEA_PLAN_CACHE", str(tmp_path_factory.mktemp("plan-cache")))
        yield

SMALL = Shape("small", hidden=128, layers=4, heads=4, kv_heads=2, intermediate=256, vocab=1000, tied=True,
              context=4096)
SMALL_RUN = ["train.per_device_batch=4", "train.max_completion_tokens=200"]   # sequences of 204 + 200 tokens


def _real_policy(cfg, shape: Shape, layers: int):
    """The same policy as fake_pass.fake_policy, with real (uninitialised) CPU tensors."""
    from accelerate import Accelerator
    from peft import get_peft_model

    from train.run import lora_config

    model = get_peft_model(fp._qwen2(shape, layers, torch.bfloat16).to_empty(device="cpu"), lora_config(cfg))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model.train()
    return Accelerator(cpu=True, mixed_precision="bf16").prepare_model(model, device_placement=False)


def _update(cfg, model, mode=None):
    """Peak bytes and FLOPs of one update pass (log-probs, GRPO's loss, backward) on 4 x 404 tokens."""
    T = 200
    ids = torch.randint(0, 100, (4, 404))
    mask = torch.ones(4, 404, dtype=torch.long)
    tr = fp.Tracker()
    with tr:
        logps, ent = fp.logps_pass(cfg, model, ids, mask, T, True)
        fp._loss(cfg, logps, ent, ids, T, 4).backward()
    return tr.peak, tr.flops


@pytest.mark.parametrize("chunk", [0, 64])
def test_fake_tensors_measure_what_real_tensors_hold(chunk):
    """The tracker counts the same peak bytes and FLOPs on fake tensors as on real ones (TRL's unchunked pass and
    train/logprobs.py's chunks), so fake mode changes nothing the plan reads."""
    cfg = load_config("3b", "grpo", [*SMALL_RUN, f"train.logprob_chunk_tokens={chunk}"])
    torch.manual_seed(0)
    real = _update(cfg, _real_policy(cfg, SMALL, 2))
    mode = fp.fake_mode()
    model = fp.fake_policy(cfg, SMALL, 2, mode)
    with mode:
        fake = _update(cfg, model)
    assert fake == real
    assert real[0] > 4 * 200 * SMALL.vocab * 4   # at least the (4, 200, V) fp32 logits


def test_depth_extrapolation_matches_a_deeper_measurement():
    """Bytes and FLOPs are affine in the decoder's depth: 2 and 3 layers predict 5 to within 0.5%."""
    cfg = load_config("3b", "grpo", [*SMALL_RUN, "train.logprob_chunk_tokens=64"])
    got = {d: fp.measure(cfg, SMALL, d, "update") for d in (2, 3, 5)}
    for field in ("peak_bytes", "flops"):
        predicted = fp.extrapolate({d: getattr(got[d], field) for d in (2, 3)}, 5)
        assert predicted == pytest.approx(getattr(got[5], field), rel=5e-3)
    assert got[3].peak_bytes > got[2].peak_bytes   # each layer adds its checkpointed input, LoRA and grads


def test_shapes_give_the_published_parameter_counts():
    """Qwen2.5-3B has 3.09B parameters and 7B 7.62B (their model cards); the shape table reproduces them."""
    assert pd.shape("Qwen/Qwen2.5-3B").params() == pytest.approx(3.09e9, rel=0.01)
    assert pd.shape("Qwen/Qwen2.5-7B").params() == pytest.approx(7.62e9, rel=0.01)
    # vLLM's KV sizing: 2 (K, V) x layers x kv_heads x head_dim x 2 bytes; 36 KiB per token at 3B, 56 KiB at 7B
    assert pd.shape("Qwen/Qwen2.5-3B").kv_bytes_per_token() == 36 * 1024
    assert pd.shape("Qwen/Qwen2.5-7B").kv_bytes_per_token() == 56 * 1024


def test_trl_unchunked_pass_lies_in_the_logits_arithmetic_band():
    """Independent number: TRL 0.29.0's pass on fp32 logits peaks at 4.3 to 4.7 copies of one micro-batch's fp32
    logits (16 x 2,048 x 151,936 x 4 B = 18.5 GiB), 80 to 87 GiB; the fake measurement of the whole unchunked
    update at 3B lands there, and the plan says no on an 80 GB card, naming the chunked pass."""
    cfg = load_config("3b", "grpo", ["train.logprob_chunk_tokens=0"])
    shape = pd.shape(cfg["model.name"])
    logits = 16 * 2048 * shape.vocab * 4
    assert logits / GIB == pytest.approx(18.5, abs=0.05)
    update = fp.measure_depth(cfg, shape, "update")
    assert 4.3 * logits <= update.peak_bytes <= 4.7 * logits
    from train import envelope as ev

    resident, trainable = fp.resident(cfg, shape)
    m = {"resident": resident, "trainable": trainable, "update": update,
         "rollout": fp.measure_depth(cfg, shape, "rollout")}
    stage = ev.train_stage(cfg, shape, pd.card("h100-80gb"), m, 0.0)
    assert not stage.fits and stage.fix == "train.logprob_chunk_tokens=4096"


GPU_SCALES = [s for s in SCALES if launch(s).gpus]


@pytest.fixture(scope="module")
def measured():
    return {}


@pytest.mark.parametrize("scale", GPU_SCALES)
def test_every_stage_fits_its_target_cards(scale, measured):
    """At every GPU scale's configured shapes, every stage's predicted peak is at most headroom (0.9) x each
    target card's memory (its scale file's [targets]); an engine's need fits inside its reservation."""
    targets = pd.targets(scale)
    lines = []
    for role, cards in targets.items():
        for card in cards:
            got = tp.plan(scale, card, log=lambda *_: None, measured=measured.get(scale))
            measured[scale] = got["measured"]
            lines += [f"{s.name} on {card}: {s.peak_gib:.1f} GiB, fix {s.fix}" for s in got["stages"]
                      if s.role == role and not s.fits]
    assert not lines, "\n".join(lines)


@pytest.fixture(scope="module")
def measured_3b():
    """3b's measurement at its own settings, kept in this module's folder: the fit test and the huge micro-batch
    test reuse its parts instead of measuring them again."""
    return tp.measure_scale(load_config("3b", "grpo"), pd.shape(load_config("3b")["model.name"]), lambda *_: None)


def test_the_measurement_is_kept_by_the_settings_it_read(measured_3b):
    """A second plan with the same inputs reuses the kept measurement, part by part (equal values, the plan says
    so), when only a setting nothing reads changed (the judge's model); a setting the passes read (the
    micro-batch) measures the passes again, and the resident weights and the scorer (which never read it) are
    reused. Each entry records what its part read (the log-prob chunk among the passes'), with its value."""
    said = []
    shape = pd.shape(load_config("3b")["model.name"])

    def run(*extra):
        said.clear()
        m = tp.measure_scale(load_config("3b", "grpo", list(extra)), shape, said.append)
        return m, {w.split("of the ")[1].split()[0] for w in said if w.startswith("[plan] stored")}

    again, stored = run("judge.model=another/judge")
    assert again == measured_3b and not stored and sum("reused the measurement" in w for w in said) == 3
    # 512 rows: the passes' floor (no fake pass needed, see the next test), measured again under its own entry
    huge, stored = run("train.per_device_batch=512")
    assert stored == {"passes"} and huge["update"].peak_bytes > 4 * measured_3b["update"].peak_bytes
    assert huge["scorer"] == measured_3b["scorer"] and huge["resident"] == measured_3b["resident"]
    entries = {json.loads(p.read_text())["reads"]["train.per_device_batch"]: json.loads(p.read_text())["reads"]
               for p in plan_cache.folder().glob("passes-*.json")}
    assert set(entries) >= {16, 512}
    reads = entries[16]
    assert "train.logprob_chunk_tokens" in reads and "train.lora_rank" in reads and ":method" in reads
    assert "judge.model" not in reads
    assert "train.save_steps" not in reads   # lora_config reads its four keys of the train section, not all


def test_the_plan_says_no_to_a_huge_micro_batch(capsys):
    """--override train.per_device_batch=512: exit 1 at the training stage; its checkpointed layer inputs alone
    (512 x 2,252 x 2,048 x 2 B x 36 = 158 GiB) exceed every card, and the fix keeps the batch of 2,048 with the
    scale's own micro-batch."""
    rc = tp.main(["--scale", "3b", "--gpu", "h100-80gb", "--override", "train.per_device_batch=512"])
    out = capsys.readouterr()
    assert rc == 1
    assert "train grpo does not fit h100-80gb" in out.err
    assert "fix: train.per_device_batch=16 train.grad_accum=128" in out.err


def test_bad_card_is_one_line_naming_the_valid_ones(capsys):
    assert tp.main(["--scale", "3b", "--gpu", "b200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "h100-80gb" in err[0] and "rtx-5090-32gb" in err[0]


def test_study_totals_by_hand():
    """Seven 10 h runs and 14 GPU-hours of measurement on 8 GPUs: 84 GPU-hours; with one training GPU the runs
    go one after another (70 h) and the last run's 2 h of measurement spreads over 7 GPUs; elastic: every run
    at once, 10 h + 2 / 7 h, or 84 / 8 = 10.5 h."""
    from train.envelope import Stage

    card = pd.card("h100-80gb")
    stages = [Stage(f"train m{i}", "train", 1.0, card, 10.0) for i in range(7)] + \
        [Stage("worker probe", "infer", 1.0, card, 14.0)]
    total, fixed, elastic = tp.totals(stages, 8, 1)
    assert total == 84.0
    assert fixed == pytest.approx(70.0 + 2.0 / 7)
    assert elastic == pytest.approx(10.5)


def test_a_worker_holds_one_weight_copy_the_larger_phase_by_hand():
    """infer.worker.placement's two placements, by hand at 7B's shapes on the 32 GB card with a 3 GiB scoring pass.
    One copy: max(generating: 0.8 x 31.8 + 2 contexts = 27.44; scoring: engine asleep 2 + 2 contexts + weights +
    adapter + fp32 head + pass). Two copies (the setting off, the engine at 0.5): all at once, over the card, and
    the fix names the setting."""
    from train import envelope as ev

    shape = pd.shape("Qwen/Qwen2.5-7B")
    scorer = {"pass": fp.Measured(3 * GIB, 1.0), "trainable": 20e6}
    jobs = {"probe": (10, 0.0)}
    weights, head = 2 * shape.params() / GIB, 4 * 152064 * 3584 / GIB
    assert 14.1 < weights < 14.3 and 2.0 < head < 2.1                  # 7.6 B bf16 parameters; 2.03 GiB head
    card = pd.card("rtx-5090-32gb")
    one = ev.worker_stage(load_config("7b"), shape, card, "probe", scorer, jobs)
    score = 2 + 2 + weights + 40e6 / GIB + head + 3
    assert one.detail["generate_gib"] == pytest.approx(0.8 * 31.8 + 2)
    assert one.detail["score_gib"] == pytest.approx(score) and score < 0.8 * 31.8 + 2
    assert one.peak_gib == pytest.approx(0.8 * 31.8 + 2) and one.fits
    assert one.detail["swap_hours"] == pytest.approx(10 * 200 * 4 * weights * GIB / 8e9 / 3600)
    greedy = ev.worker_stage(load_config("7b"), shape, card, "greedy", scorer, jobs)
    assert greedy.detail["score_gib"] == 0 and greedy.detail["swap_hours"] == 0 and greedy.fits
    two = ev.worker_stage(load_config("7b", None, ["measure.one_weight_copy=false", "measure.gpu_memory_utilization=0.5"]),
                          shape, card, "probe", scorer, jobs)
    assert two.peak_gib == pytest.approx(0.5 * 31.8 + weights + 40e6 / GIB + head + 3 + 1)
    assert not two.fits and two.fix == "measure.one_weight_copy=true" and two.detail["swap_hours"] == 0
    small = ev.worker_stage(load_config("7b", None, ["measure.gpu_memory_utilization=0.5"]), shape, card, "probe",
                            scorer, jobs)                              # 15.9 GiB: under the engine's 16.7 GiB need
    assert not small.fits and small.fix == "measure.gpu_memory_utilization=0.55"
