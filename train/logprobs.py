"""The training pass's per-token log-probabilities and entropies without the (B, T, V) logits tensor.

TRL 0.29.0 (`GRPOTrainer._get_per_token_logps_and_entropies`) asks the model for all completion logits at
once. After Accelerate's prepare with bf16, the forward runs under bf16 autocast and hands back fp32
logits (`convert_outputs_to_fp32`); the `/ temperature` copy, the log-softmax, the entropy and the backward
then hold several (B, T, V) fp32 tensors: 18.5 GiB each for a 3B micro-batch of 16 x 2,048 positions over
151,936 tokens. Here the decoder body runs once and only its final hidden states (B, T, H) are kept; the LM
head, the fp32 upcast, the temperature and the log-softmax run on `chunk_tokens` flattened positions at a
time, each chunk under activation checkpointing, so the backward recomputes one chunk's logits at a time.
The arithmetic is TRL's (same ops, same dtypes, same autocast), so the loss and its gradients are TRL's up
to floating-point rounding (tests/train/test_logprob_chunks.py).

Alignment, as TRL's (S = prompt + completion length, K = logits_to_keep completion positions):

    input index        0    ...   S-K-1    S-K    ...   S-2     S-1
    input token        p0   ...   p_last   c0     ...   c_K-2   c_K-1
    hidden state used              h        h      ...   h       (none: it predicts past the end)
    predicts                       c0       c1     ...   c_K-1

    hidden[:, S-K-1 : S-1]  (B, K, H)   ->  logits (B, K, V)  ->  log p(input_ids[:, S-K:])  (B, K)

Units: log-probabilities and entropies in nats of the temperature-scaled policy softmax(z / temperature).
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint
from trl.trainer.utils import entropy_from_logits

SUB_ROWS = 128  # rows per logsumexp / entropy temporary inside a chunk (TRL's entropy_from_logits default)


def _parts(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The decoder body and the LM head inside the model the trainer holds (Accelerate-prepared, PEFT-wrapped
    or plain). LoRA layers live inside the body's modules, so calling the body directly applies the adapter;
    a head tied to the embeddings (Qwen2.5-3B, the tiny model) is the same module either way."""
    from accelerate.utils import extract_model_from_parallel

    inner = extract_model_from_parallel(model, keep_fp32_wrapper=True)  # DDP / torch.compile wrappers off
    if hasattr(inner, "get_base_model"):  # PEFT's PeftModel: the transformers model, LoRA injected in place
        inner = inner.get_base_model()
    head = inner.get_output_embeddings()
    body = inner.get_decoder()
    if head is None or body is inner:
        raise TypeError(f"{type(inner).__name__} has no separate decoder and LM head; "
                        "use train.logprob_chunk_tokens = 0 (TRL's unchunked pass) for this model")
    return body, head


def _forward_autocast(model):
    """A factory of the autocast context the model's own forward runs under. Accelerate's prepare (native
    mixed precision) keeps the original forward as `_original_forward` and wraps the new one in its autocast
    (bf16 at the real scales); an unprepared model runs in its weights' dtype."""
    if getattr(model, "_original_forward", None) is None:
        return nullcontext
    from accelerate.utils import get_mixed_precision_context_manager

    return partial(get_mixed_precision_context_manager, native_amp=True)


def _chunk_logps(head, autocast, temperature: float, entropy_out: list | None, h: Tensor, ids: Tensor) -> Tensor:
    """One chunk: h (n, H) final hidden states, ids (n,) the tokens they predict -> log p(ids) (n,) fp32 nats.

    Logits z = head(h) under the forward's autocast, upcast to fp32 as the prepared forward returns them,
    divided by the temperature; log p(id) = z[id] - logsumexp(z) (TRL's `selective_log_softmax`, fp32
    branch), the logsumexp's (SUB_ROWS, V) temporaries a few rows at a time. The entropy, -sum p log p of
    log_softmax(z) (TRL's own `entropy_from_logits`), is appended to `entropy_out` without grad, once: under
    checkpointing this function runs again in the backward, and that second call skips it.
    """
    with autocast():
        z = head(h).float()    # (n, V) fp32: the head's output (bf16 under bf16 autocast) upcast, then dropped
    z = z.div_(temperature)    # (n, V) fp32, in place (neither op's backward needs its output)
    lse = torch.cat([torch.logsumexp(part, dim=-1) for part in z.split(SUB_ROWS)])    # (n,), SUB_ROWS at a time
    logp = z.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - lse                          # (n,) nats
    if entropy_out is not None and not entropy_out:
        with torch.no_grad():
            entropy_out.append(entropy_from_logits(z, chunk_size=SUB_ROWS))          # (n,) nats
    return logp


def token_logps_and_entropies(model, input_ids: Tensor, attention_mask: Tensor, logits_to_keep: int,
                              temperature: float, compute_entropy: bool, chunk_tokens: int
                              ) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs (B, K) fp32, with grad when grad is enabled, and entropies (B, K) fp32 without
    grad (None unless `compute_entropy`) of input_ids[:, -K:], K = `logits_to_keep`, in nats.

    input_ids, attention_mask (B, S), prompts left-padded as TRL builds them. At most `chunk_tokens` rows of
    (., V) logits exist at once, in the forward and in the backward.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}; 0 means TRL's unchunked pass, "
                         "which the caller chooses instead of this function")
    B, S = input_ids.shape
    K = int(logits_to_keep)
    if not 1 <= K < S:
        raise ValueError(f"logits_to_keep must be in [1, {S - 1}] for sequences of {S} tokens, got {K}")
    body, head = _parts(model)
    autocast = _forward_autocast(model)
    with autocast():
        hidden = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    H = hidden.size(-1)
    rows = hidden[:, S - K - 1 : S - 1, :].reshape(B * K, H)  # (B*K, H): the states that predict c0..c_K-1
    targets = input_ids[:, S - K :].reshape(B * K)             # (B*K,) token ids
    grad = torch.is_grad_enabled()
    logps, entropies = [], []
    for h, ids in zip(rows.split(chunk_tokens), targets.split(chunk_tokens)):
        slot = [] if compute_entropy else None
        fn = partial(_chunk_logps, head, autocast, temperature, slot)
        logps.append(checkpoint(fn, h, ids, use_reentrant=False) if grad else fn(h, ids))
        if slot is not None:
            entropies.append(slot[0])
    logp = torch.cat(logps).view(B, K)
    return logp, (torch.cat(entropies).view(B, K) if compute_entropy else None)
