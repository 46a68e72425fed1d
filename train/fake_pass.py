"""Peak memory and FLOPs of the trainer's passes, measured on CPU with PyTorch fake tensors (no real bytes).

The policy is the trainer's: a Qwen2 decoder of the real width, vocabulary and dtype (bf16), wrapped with PEFT
LoRA as train/run.py wraps it (rank, alpha, targets from the config; PEFT keeps the adapter in fp32), gradient
checkpointing as TRL 0.29.0 enables it (non-reentrant), then `Accelerator.prepare_model` itself (bf16: the
forward under autocast, outputs converted to fp32). Only device placement is skipped (the fake tensors already
sit on the CPU device), so the autocast is CPU's, not CUDA's. The passes are the trainer's own functions:
`train.logprobs.token_logps_and_entropies` when train.logprob_chunk_tokens > 0, else TRL's
`GRPOTrainer._get_per_token_logps_and_entropies` itself, then the objective's `objective_loss` and the backward.

Memory: `Tracker` counts every storage an op creates (its bytes, until the storage is freed) and keeps the
peak; the tracked bytes are the allocator's live bytes, without CUDA's caching. Data-dependent scalars (a mask's
`.all()`, a metric's `float()`) read as 0 / False: the masks then take their padded branch, as in training.
FLOPs: torch.utils.flop_counter's formulas (matmuls and attention; elementwise ops count 0), in the same mode.

Depth: every decoder layer is the same module, so bytes and FLOPs are affine in the number of layers. The
passes run at `DEPTHS` = (2, 3) layers of the real width, vocabulary, micro-batch and sequence length, and
extrapolate to the real depth (a 36-layer fake pass takes a minute on two cores; tests/train/test_plan.py checks
the extrapolation against 5 layers). Rows are measured as configured: the peak is not affine in them (with
log-prob chunks, where it falls moves with the number of chunks).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from train.plan_data import Shape

DEPTHS = (2, 3)


def _flop_formulas() -> dict:
    """torch's FLOP formulas by op packet, plus CPU's flash attention (forward and backward), which torch
    registers only for the CUDA kernels; the formulas read the query/key/value shapes, the same arguments."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    formulas = dict(flop_registry)
    formulas[aten._scaled_dot_product_flash_attention_for_cpu] = flop_registry[aten._scaled_dot_product_flash_attention]
    formulas[aten._scaled_dot_product_flash_attention_for_cpu_backward] = \
        flop_registry[aten._scaled_dot_product_flash_attention_backward]
    # Under inference mode the composite ops reach the mode whole (no autograd decomposition).
    formulas[aten.scaled_dot_product_attention] = flop_registry[aten._scaled_dot_product_flash_attention]
    formulas[aten.linear] = lambda x, w, *a, out_val=None, **k: 2 * out_val.numel() * w.shape[-1]
    return formulas


_SCALAR_OPS = (torch.ops.aten._local_scalar_dense, torch.ops.aten.is_nonzero, torch.ops.aten.equal)


class Tracker(TorchDispatchMode):
    """Live bytes of the storages created under it (weakref finalizers drop them when freed), their peak, and
    the FLOPs of its matmuls and attention (torch.utils.flop_counter's formulas; dense attention, no causal
    halving). One mode for both: FlopCounterMode's module tracker holds tensors alive and inflates the peak."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.flops = 0
        self._formulas = _flop_formulas()
        self._seen: dict[int, weakref.finalize] = {}

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = id(st)
        if key in self._seen:
            return
        n = st.nbytes()
        self.live += n
        self.peak = max(self.peak, self.live)
        self._seen[key] = weakref.finalize(st, self._free, key, n)

    def _free(self, key: int, n: int) -> None:
        self.live -= n
        self._seen.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._overloadpacket in _SCALAR_OPS:   # .item() / bool() / equal(): no data in fake tensors
            return False if func._overloadpacket is not torch.ops.aten._local_scalar_dense or \
                args[0].dtype == torch.bool else 0
        out = func(*args, **(kwargs or {}))
        formula = self._formulas.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **(kwargs or {}), out_val=out)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out


@dataclass(frozen=True)
class Measured:
    peak_bytes: float      # above what was live when the pass started (weights, adapter)
    flops: float


def fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def _qwen2(shape: Shape, layers: int, dtype: torch.dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    conf = Qwen2Config(hidden_size=shape.hidden, num_hidden_layers=layers, num_attention_heads=shape.heads,
                       num_key_value_heads=shape.kv_heads, intermediate_size=shape.intermediate,
                       vocab_size=shape.vocab, tie_word_embeddings=shape.tied, max_position_embeddings=shape.context,
                       use_cache=False)
    conf._attn_implementation = "sdpa"   # from_pretrained's default on a GPU
    with torch.device("meta"):
        return Qwen2ForCausalLM(conf).to(dtype)


def _to_fake(model, mode) -> None:
    """Replace every meta parameter / buffer by a fake CPU tensor of its shape and dtype (ties kept). Done by
    assignment: Module.to() swaps fake parameters, which fake tensors refuse."""
    made: dict[int, torch.Tensor] = {}
    with mode:
        for mod in model.modules():
            for where in (mod._parameters, mod._buffers):
                for k, t in list(where.items()):
                    if t is None:
                        continue
                    if id(t) not in made:
                        new = torch.empty(t.shape, dtype=t.dtype, device="cpu")
                        made[id(t)] = torch.nn.Parameter(new, requires_grad=t.requires_grad) \
                            if isinstance(t, torch.nn.Parameter) else new
                    where[k] = made[id(t)]


def fake_policy(cfg, shape: Shape, layers: int, mode, lora: bool = True, prepare: bool = True,
                adapter_dtype: torch.dtype | None = None):
    """The trainer's policy at `layers` decoder layers, as fake tensors (see the module doc). `adapter_dtype`:
    the adapter's dtype where it is not PEFT's fp32 (Transformers' `load_adapter` keeps the base's bf16)."""
    bf16 = cfg["train.precision"] == "bf16"
    model = _qwen2(shape, layers, torch.bfloat16 if bf16 else torch.float32)
    if lora:
        from peft import get_peft_model

        from train.run import lora_config

        model = get_peft_model(model, lora_config(cfg))
        for name, p in model.named_parameters():
            if adapter_dtype is not None and "lora_" in name:
                p.data = p.data.to(adapter_dtype)
    _to_fake(model, mode)
    if cfg["train.gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    if prepare and bf16:
        from accelerate import Accelerator

        model = Accelerator(cpu=True, mixed_precision="bf16").prepare_model(model, device_placement=False)
    return model


def resident_bytes(model) -> tuple[int, int]:
    """(all parameter and buffer bytes, trainable parameter count) of a fake model; tied tensors once."""
    seen, total, trainable = set(), 0, 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += t.untyped_storage().nbytes()
        if isinstance(t, torch.nn.Parameter) and t.requires_grad:
            trainable += t.numel()
    return total, trainable


class _TRLSelf:
    """What TRL's `_get_per_token_logps_and_entropies` reads from its trainer (text-only inputs)."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.model_kwarg_keys = {"input_ids", "attention_mask", "logits_to_keep", "use_cache"}


def logps_pass(cfg, model, ids, mask, keep: int, entropy: bool):
    """The trainer's per-token log-prob / entropy pass (train/trainer.py `_get_per_token_logps_and_entropies`)."""
    chunk = int(cfg["train.logprob_chunk_tokens"])
    temp = float(cfg["train.temperature"])
    if chunk > 0:
        from train.logprobs import token_logps_and_entropies

        return token_logps_and_entropies(model, ids, mask, keep, temp, entropy, chunk)
    from trl import GRPOTrainer

    return GRPOTrainer._get_per_token_logps_and_entropies(_TRLSelf(temp), model, ids, mask, keep,
                                                          compute_entropy=entropy)


def _loss(cfg, logps, entropies, ids, keep: int, B: int):
    """objective_loss of the config's method on one micro-batch (B rows, whole groups of num_generations),
    its inputs made as the trainer makes them: the objective's `prepare` on a rollout (rewards alternate 0/1,
    so every group is mixed), then token_batch of the prepared extras and the pass's log-probs."""
    from train.objectives import Normalisers, get, objective_loss, settings_for, token_batch

    from torch._subclasses.fake_tensor import unset_fake_temporarily

    T, G = keep, int(cfg["train.num_generations"])
    obj, s = get(cfg.method), settings_for(cfg)
    with unset_fake_temporarily():   # once per rollout, real (B, T) tensors: its group statistics need values
        zeros = torch.zeros(B, T)
        rollout = {"rewards": (torch.arange(B) % 2).float(), "group_ids": torch.arange(B) // G,
                   "mask": torch.ones(B, T), "completion_ids": torch.zeros(B, T, dtype=torch.long),
                   "old_logp": zeros, "ref_logp": zeros, "old_entropy": zeros}
        prep = obj.prepare(rollout, s)
    prep.pop("metrics", None)
    extras = {k: v for k, v in prep.items() if k != "advantages"}
    tb = token_batch({**extras, "logp": logps, "old_logp": logps.detach(), "ref_logp": zeros, "entropy": entropies,
                      "mask": torch.ones(B, T), "completion_ids": ids[:, -T:],
                      "advantages": prep["advantages"].float()}, 1.0 if obj.needs_initial_entropy else None)
    loss, _ = objective_loss(obj, tb, s, Normalisers(tok=float(B * T), ga=int(cfg["train.grad_accum"])))
    return loss


def measure(cfg, shape: Shape, layers: int, what: str, rows: int | None = None) -> Measured:
    """One pass at `layers` layers: "update" (grad: log-probs + entropies, the objective's loss, the backward
    of one micro-batch of per_device_batch rows), "rollout" (no grad: old / reference log-probs and entropies
    of per_device_batch rows, TRL's row batch). Sequences: max_prompt_tokens + max_completion_tokens.
    `cfg` is loaded with its method: the update's loss is that objective's (GRPO's for the planner: objectives
    that select tokens by value need real tensors, measured apart: train.plan.objective_bytes)."""

    B = int(rows or cfg["train.per_device_batch"])
    T = int(cfg["train.max_completion_tokens"])
    S = int(cfg["data.max_prompt_tokens"]) + T
    mode = fake_mode()
    model = fake_policy(cfg, shape, layers, mode)
    with mode:
        ids = torch.randint(0, shape.vocab, (B, S))
        mask = torch.ones(B, S, dtype=torch.long)
        tracker = Tracker()
        with tracker:
            if what == "update":
                logps, ent = logps_pass(cfg, model, ids, mask, T, True)
                _loss(cfg, logps, ent, ids, T, B).backward()
            elif what == "rollout":
                with torch.no_grad():
                    logps_pass(cfg, model, ids, mask, T, True)
            else:
                raise ValueError(f"unknown pass {what!r}; update or rollout")
    return Measured(float(tracker.peak), float(tracker.flops))


def extrapolate(at: dict[int, float], layers: int) -> float:
    """The affine fit through the two depths of `at` ({depth: value}) evaluated at `layers`."""
    (d0, v0), (d1, v1) = sorted(at.items())
    return v0 + (v1 - v0) * (layers - d0) / (d1 - d0)


def measure_depth(cfg, shape: Shape, what: str, depths=DEPTHS) -> Measured:
    """`measure` at the real depth (and the real micro-batch: rows are not affine, the log-prob chunks change
    where the peak falls), extrapolated from `depths`."""
    got = {d: measure(cfg, shape, d, what) for d in depths}
    return Measured(extrapolate({d: m.peak_bytes for d, m in got.items()}, shape.layers),
                    extrapolate({d: m.flops for d, m in got.items()}, shape.layers))


def checkpoint_floor(cfg, shape: Shape) -> float:
    """A lower bound of the update pass's peak bytes: the bf16 input of every checkpointed decoder layer of one
    micro-batch, live together at the start of the backward (B x S x hidden x 2 bytes x layers)."""
    B, S = cfg["train.per_device_batch"], cfg["data.max_prompt_tokens"] + cfg["train.max_completion_tokens"]
    return float(B * S * shape.hidden * 2 * shape.layers)


def resident(cfg, shape: Shape, depths=DEPTHS) -> tuple[float, float]:
    """(bytes of weights + adapter, trainable parameters) at the real depth (extrapolated like the passes)."""
    got = {}
    for d in depths:
        got[d] = resident_bytes(fake_policy(cfg, shape, d, fake_mode(), prepare=False))
    return (extrapolate({d: b for d, (b, _) in got.items()}, shape.layers),
            extrapolate({d: n for d, (_, n) in got.items()}, shape.layers))


def measure_scorer(cfg, shape: Shape, layers: int, rows: int, seq: int, chunk: int) -> Measured:
    """A measurement worker's teacher-forced scoring (infer/backends/hf.py `_score_batch`) at `layers` layers:
    the bf16 decoder body over `rows` sequences of `seq` tokens under inference mode, then one row's
    `infer.entropy.chunked_stats_from_hidden` over `seq` positions with the fp32 head copy (the copy is
    resident, counted by the caller). Peak: max(the body's, its hidden states + one row's statistics); the rows
    run one after another, each freeing its chunks."""
    from infer.entropy import chunked_stats_from_hidden

    mode = fake_mode()
    model = fake_policy(cfg, shape, layers, mode, prepare=False, adapter_dtype=torch.bfloat16)
    model.eval()
    inner = model.get_base_model()
    with mode, torch.inference_mode():
        ids = torch.randint(0, shape.vocab, (rows, seq))
        mask = torch.ones(rows, seq, dtype=torch.long)
        w32 = torch.empty(shape.vocab, shape.hidden)
        body = Tracker()
        with body:
            hidden = inner.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state   # (rows, seq, H)
        row = Tracker()
        with row:
            chunked_stats_from_hidden(hidden[0].float(), w32, ids[0], chunk)
    held = rows * seq * shape.hidden * hidden.element_size()
    return Measured(float(max(body.peak, held + row.peak)), float(body.flops + rows * row.flops))
