"""Issue 38: train/logprobs.py's chunked pass equals TRL 0.29.0's unchunked one on the tiny model.

The model is the one the trainer holds: the tiny policy with a LoRA adapter (PEFT), prepared by Accelerate
(in bf16: autocast forward, fp32 logits). TRL's own `_get_per_token_logps_and_entropies` (its unbound
function, the `profiling_decorator` peeled off) is the oracle. Compared: per-token log-probs, entropies,
a real objective's loss on them, and the gradient of every LoRA parameter.

Tolerances. The chunked pass runs TRL's operations in TRL's dtypes under the same autocast; what may differ
is the blocking of the head's matrix product (rows grouped by chunk instead of by sequence; a chunk of one
row is a matrix-vector product). Measured on this CPU: bit-identical in bf16 and fp32 for chunks of 7, 40
and 4096 rows, and within 5e-7 (log-probs) / 2e-6 (relative gradient) for chunks of one row in fp32.
fp32: 1e-5 absolute on log-probs and entropies of a few nats, 1e-5 of each gradient's largest entry.
bf16: the logits are rounded to bf16 at the head's output in both passes, so another kernel's blocking may
flip one logit by one bf16 ulp (2^-8 relative, ~4e-3 for the tiny model's |z| <= 1): that is the tolerance,
and 1e-2 relative on the gradients; an alignment or temperature error moves log-probs by whole nats.
"""

import gc
from types import SimpleNamespace

import pytest
import torch

from rcea.config import load_config
from train.logprobs import token_logps_and_entropies

B, G, P, K = 8, 4, 6, 5  # rows, group size, prompt width, completion positions (B*K = 40 rows)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(autouse=True)
def environment_restored(fresh_accelerate):
    """Accelerator(mixed_precision=...) writes into os.environ and a process-wide AcceleratorState: each test starts
    from a plain single process and puts both back (tests/train/conftest.py fresh_accelerate)."""
    yield


@pytest.fixture(scope="module")
def tiny_path():
    from rcea.tiny import ensure_tiny_model

    return ensure_tiny_model(load_config("tiny"))


def prepared_policy(path, precision: str, checkpointing: bool):
    """The tiny policy as ObjectiveGRPOTrainer holds it: PEFT LoRA, (optionally) gradient checkpointing as TRL
    enables it, prepared by Accelerate. LoRA's B starts at 0 in PEFT, which would give A zero gradients:
    both are drawn at random here so every adapter tensor has a gradient to compare."""
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    acc = Accelerator(cpu=True, mixed_precision="bf16" if precision == "bf16" else "no")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                             task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    if checkpointing:
        model.gradient_checkpointing_enable({"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    return acc.prepare(model)


def batch(vocab: int) -> dict:
    """B rows: prompts left-padded to P (lengths 2..P), completions right-padded to K (lengths 1..K)."""
    g = torch.Generator().manual_seed(2)
    prompt_len = torch.tensor([6, 2, 4, 6, 3, 5, 6, 2])
    comp_len = torch.tensor([5, 1, 3, 5, 2, 4, 5, 3])
    prompt_mask = (torch.arange(P) >= P - prompt_len[:, None]).long()
    comp_mask = (torch.arange(K) < comp_len[:, None]).long()
    ids = torch.randint(3, vocab, (B, P + K), generator=g)
    ids[:, :P] = ids[:, :P] * prompt_mask        # pad id 0 (<|endoftext|>) on the left of prompts
    ids[:, P:] = ids[:, P:] * comp_mask          # and on the right of completions
    return {"input_ids": ids, "attention_mask": torch.cat([prompt_mask, comp_mask], 1), "mask": comp_mask.double()}


def trl_pass(model, ids, attn, temperature):
    """TRL 0.29.0's unchunked pass itself: the whole (B, K, V) logits from the prepared forward."""
    from trl import GRPOTrainer

    fn = GRPOTrainer._get_per_token_logps_and_entropies.__wrapped__
    me = SimpleNamespace(model_kwarg_keys={"input_ids", "attention_mask", "logits_to_keep"}, temperature=temperature)
    return fn(me, model, ids, attn, K, compute_entropy=True)


def loss_of(logp, entropy, mask):
    """A real objective's loss (GTPO: entropy-weighted advantages, clipped ratios) on these log-probs."""
    from train.objectives import batch_loss

    g = torch.Generator().manual_seed(3)
    old = logp.detach().double() + (torch.rand(logp.shape, generator=g, dtype=torch.float64) - 0.5) * 0.3
    b = {"logp": logp.double(), "old_logp": old, "ref_logp": old, "entropy": entropy.double(),
         "old_entropy": entropy.double(), "mask": mask, "completion_ids": torch.zeros(B, K, dtype=torch.long),
         "rewards": torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 1]), "group_ids": torch.arange(B) // G}
    loss, _ = batch_loss("gtpo", b)
    return loss


def run(model, data, temperature, chunk):
    """(log-probs, entropies, loss, {LoRA name: grad}) by TRL's pass (chunk 0) or the chunked one."""
    model.zero_grad(set_to_none=True)
    ids, attn = data["input_ids"], data["attention_mask"]
    if chunk:
        logp, ent = token_logps_and_entropies(model, ids, attn, K, temperature, True, chunk)
    else:
        logp, ent = trl_pass(model, ids, attn, temperature)
    loss = loss_of(logp, ent, data["mask"])
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return logp.detach(), ent, float(loss.detach()), grads


TOL = {"fp32": dict(logp=1e-5, grad_rel=1e-5), "bf16": dict(logp=4e-3, grad_rel=1e-2)}


@pytest.mark.parametrize("precision,checkpointing", [("fp32", False), ("bf16", True)])
def test_chunked_pass_equals_trl(tiny_path, precision, checkpointing, monkeypatch):
    model = prepared_policy(tiny_path, precision, checkpointing)
    vocab = model.get_output_embeddings().weight.size(0)
    data = batch(vocab)
    temperature = 0.7
    ref_logp, ref_ent, ref_loss, ref_grads = run(model, data, temperature, 0)
    assert ref_logp.dtype == ref_ent.dtype == torch.float32 and ref_logp.shape == (B, K)
    assert len(ref_grads) == 2 * len(LORA_TARGETS) * 3 and all(float(g.abs().max()) > 0 for g in ref_grads.values())
    tol = TOL[precision]
    for chunk, sub in ((1, None), (7, None), (40, None), (4096, None), (40, 3)):  # 7 does not divide B*K = 40
        if sub:  # logsumexp / entropy temporaries of 3 rows inside 40-row chunks (128 at the real scales)
            monkeypatch.setattr("train.logprobs.SUB_ROWS", sub)
        logp, ent, loss, grads = run(model, data, temperature, chunk)
        assert logp.dtype == ent.dtype == torch.float32 and not ent.requires_grad
        torch.testing.assert_close(logp, ref_logp, rtol=0, atol=tol["logp"])
        torch.testing.assert_close(ent, ref_ent, rtol=0, atol=tol["logp"])
        assert loss == pytest.approx(ref_loss, rel=tol["grad_rel"], abs=1e-6)
        for name, g in ref_grads.items():
            scale = float(g.abs().max())
            torch.testing.assert_close(grads[name], g, rtol=0, atol=tol["grad_rel"] * scale, msg=name)


def test_alignment_against_a_hand_computed_position(tiny_path):
    """Independent of TRL: the log-prob of completion token j is log_softmax(logits at S-K-1+j / T)[token]."""
    model = prepared_policy(tiny_path, "fp32", False)
    data = batch(model.get_output_embeddings().weight.size(0))
    ids, attn = data["input_ids"], data["attention_mask"]
    with torch.no_grad():
        logp, ent = token_logps_and_entropies(model, ids, attn, K, 2.0, True, 3)
        full = model(input_ids=ids, attention_mask=attn).logits.double() / 2.0   # (B, S, V)
    lp = torch.log_softmax(full, -1)
    S = ids.size(1)
    for row, j in ((0, 0), (1, 0), (3, 4), (6, 2)):
        pos = S - K - 1 + j
        assert float(logp[row, j]) == pytest.approx(float(lp[row, pos, ids[row, S - K + j]]), abs=1e-5)
        assert float(ent[row, j]) == pytest.approx(float(-(lp[row, pos].exp() * lp[row, pos]).sum()), abs=1e-5)
    assert ent.min() > 0 and logp.max() < 0


def test_no_entropy_and_no_grad(tiny_path):
    model = prepared_policy(tiny_path, "fp32", False)
    data = batch(model.get_output_embeddings().weight.size(0))
    with torch.no_grad():
        logp, ent = token_logps_and_entropies(model, data["input_ids"], data["attention_mask"], K, 1.0, False, 7)
    assert ent is None and logp.shape == (B, K) and not logp.requires_grad
    with pytest.raises(ValueError, match="chunk_tokens"):
        token_logps_and_entropies(model, data["input_ids"], data["attention_mask"], K, 1.0, False, 0)


def test_trainer_step_is_the_same_with_and_without_chunks(tmp_path, monkeypatch):
    """End to end through train.run: one EP-GRPO step of the tiny model (rollout entropies captured from the
    no-grad old-log-prob pass, entropies in the loss) with TRL's pass (0) and with 7-row chunks (the 32 x 8
    completion positions are 256 rows: 37 chunks, the last of 4 rows). Same rollout, same entropy
    statistics, same loss and the same gradient of every LoRA parameter, to fp32 rounding."""
    from transformers import TrainerCallback

    import train.trainer as trainer_module
    from train.run import run_training

    seen = {}

    class Grads(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            seen.setdefault("grads", {n: p.grad.detach().clone() for n, p in model.named_parameters()
                                      if p.requires_grad and p.grad is not None})

    real = trainer_module.ObjectiveGRPOTrainer._add_objective_inputs

    def recording(self, out, inputs):
        res = real(self, out, inputs)
        seen.setdefault("rollout", {k: v.detach().clone() for k, v in res.items() if isinstance(v, torch.Tensor)})
        return res

    monkeypatch.setattr(trainer_module.ObjectiveGRPOTrainer, "_add_objective_inputs", recording)
    calls = []

    def counted(*args, **kwargs):
        calls.append(torch.is_grad_enabled())
        return token_logps_and_entropies(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "token_logps_and_entropies", counted)
    one_step = ["train.max_completion_tokens=8", "train.warmup_ratio=0.0", "train.max_steps=1", "data.draw_size=32",
                "toy.warm_start_steps=0"]
    runs = []
    for chunk in (0, 7):
        seen.clear()
        cfg = load_config("tiny", "ep_grpo", [*one_step, f"train.logprob_chunk_tokens={chunk}"])
        run_training(cfg, tmp_path / str(chunk), reward="synthetic", callbacks=[Grads()], log=lambda _: None)
        runs.append(dict(seen))
        assert (True in calls, False in calls) == ((True, True) if chunk else (False, False))  # loss + rollout
    (r0, g0), (r1, g1) = [(r["rollout"], r["grads"]) for r in runs]
    assert torch.equal(r0["completion_ids"], r1["completion_ids"])
    for key in ("old_per_token_logps", "advantages"):
        torch.testing.assert_close(r1[key], r0[key], rtol=0, atol=1e-5, msg=key)
    assert g0 and any(float(g.abs().max()) > 0 for g in g0.values())
    for name, g in g0.items():
        torch.testing.assert_close(g1[name], g, rtol=0, atol=1e-5 * float(g.abs().max()), msg=name)


def _peak_mib(fn) -> float:
    """Growth of this process's resident-set high-water mark while fn() runs, MiB (Linux: VmHWM, reset
    through /proc/self/clear_refs; glibc told to mmap every block >= 1 MiB, so freed tensors leave at once)."""
    def kib(field):
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

    gc.collect()  # garbage of earlier tests freed now, not inside the measured window
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = kib("VmRSS")
    fn()
    return (kib("VmHWM") - before) / 1024


def test_peak_memory_follows_the_chunk_not_the_logits():
    """fp32 policy, V = 8,192: TRL's loss step holds about three copies of the (B, K, V) logits (measured
    3.2), and doubling K doubles them; the chunked step (128 rows) holds a few chunks, whatever K is."""
    import ctypes

    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    try:
        libc = ctypes.CDLL("libc.so.6")
        assert libc.mallopt(-3, 1 << 20) == 1  # M_MMAP_THRESHOLD
        open("/proc/self/clear_refs", "w").close()
    except (OSError, AssertionError, AttributeError):
        pytest.skip("needs Linux's /proc/self/clear_refs and glibc's mallopt")
    V, rows = 8192, 4
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=True)
    model = get_peft_model(Qwen2ForCausalLM(cfg), LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))

    def step(k, chunk):
        ids = torch.randint(3, V, (rows, 8 + k), generator=torch.Generator().manual_seed(k))
        attn = torch.ones_like(ids)
        if chunk:
            logp, _ = token_logps_and_entropies(model, ids, attn, k, 1.0, True, chunk)
        else:
            logp, _ = trl_pass_k(model, ids, attn, k)
        logp.sum().backward()

    L = rows * 256 * V * 4 / 2**20  # one fp32 logits tensor at K = 256: 32 MiB
    try:
        step(64, 0), step(64, 128)  # warm-up: first-call allocations stay out of the measured peaks
        # the larger of two readings: memory freed elsewhere in the window (a thread an earlier test left in this
        # process, pages the kernel reclaims) lowers a reading, nothing outside the step raises it (seen once in
        # the whole area: 64 MiB, two copies of 32)
        trl = [max(_peak_mib(lambda: step(k, 0)) for _ in range(2)) for k in (256, 512)]
        chunked = [_peak_mib(lambda: step(k, 128)) for k in (256, 512)]
    finally:
        libc.mallopt(-3, 32 << 20)  # glibc's own ceiling for its dynamic threshold, for the tests after this one
    assert trl[0] > 2.5 * L and trl[1] - trl[0] > 2 * L, (trl, L)  # ~3 logits copies (fp32), growing with K
    # a chunk of 128 rows is L / 8: the backward holds about five of them (measured 20 MiB), not even one L
    assert max(chunked) < L and chunked[1] - chunked[0] < 0.25 * L, (chunked, L)


def trl_pass_k(model, ids, attn, k):
    from trl import GRPOTrainer

    fn = GRPOTrainer._get_per_token_logps_and_entropies.__wrapped__
    me = SimpleNamespace(model_kwarg_keys={"input_ids", "attention_mask", "logits_to_keep"}, temperature=1.0)
    return fn(me, model, ids, attn, k, compute_entropy=True)
