"""The seam to TRL 0.29.0: a thin GRPOTrainer subclass that wires in a registered objective.

Group-level work runs once per rollout in `_generate_and_score_completions` (rewards, group ids,
dynamic sampling, reference / rollout-entropy passes, `objective.prepare`); the per-token loss runs in
`_compute_loss` (`objective.token_loss`, then the GA-aware aggregation). Nothing else of TRL is changed.
Single process (one GPU or CPU), as the paper's runs (docs/settings.md, `[train]`).

Batch layout TRL hands us (B = per_device_batch * steps_per_generation rows, T completion positions):
rows come in groups of G consecutive copies of one prompt; prompts are left-padded, completions
right-padded. Extra keys we add start with `rcea_` and have leading dim B, so TRL's shuffle/split keeps
them aligned with their rows.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
from pathlib import Path

import torch
from trl import GRPOTrainer
from trl.trainer.utils import use_adapter

from rcea.layout import TRAINER_STATE
from train.objectives import Normalisers, ObjectiveSettings, get, objective_loss, token_batch
from train.logprobs import token_logps_and_entropies
from train.monitor import GAP_MAX, GAP_MEAN
from train.vllm_sync import use_policy_weights

# sha256 of inspect.getsource of the TRL 0.29.0 methods this subclass overrides or relies on.
TRL_VERSION = "0.29.0"
TRL_PINNED = {
    "_generate_and_score_completions": "2201328f05c0702f4e010ce78babda12d51ccdff655497f127267ea38b5287ae",
    "_compute_loss": "1a89b885ddc0a80b42da521161bf92d59c27be3d2a5b60b2276529f6c67dcb47",
    "_calculate_rewards": "1343ef5d60edddc6c7d8012eb5524fa725a883d95f432d6502d6642bb9e1b461",
    "_get_per_token_logps_and_entropies": "eb0ec4b68248974e59491bbb8541e4d115a33f2697969a6bd32cdb4ef2a5c634",
    "_prepare_inputs": "f824e7fb0714795697c9b4d574de1e139dd5f4404c2554e92cf1db7f60fa6c96",
    "_save_checkpoint": "b6ee0a370c266b6f6ada183d32719e4f689ac7a54086c1ec40a69a79e79921c6",
    "training_step": "9e18632f7dd8e8d8f0ebbdcc4431feb1a9e3c037a02cf8c3aec38aa68ee58814",
    "_generate_single_turn": "ea1240b0b4c488934ef4e42f9c840e56de71abe51e407c200f4c46639c78848c",
}


def trl_method_hashes() -> dict[str, str]:
    return {
        name: hashlib.sha256(inspect.getsource(getattr(GRPOTrainer, name)).encode()).hexdigest()
        for name in TRL_PINNED
    }


def _pad_cat(tensors: list[torch.Tensor], value, left: bool) -> torch.Tensor:
    """Concatenate (b_k, T_k) tensors along rows, padding to the longest T on the left or right."""
    width = max(t.size(1) for t in tensors)
    out = []
    for t in tensors:
        pad = t.new_full((t.size(0), width - t.size(1)), value)
        out.append(torch.cat([pad, t] if left else [t, pad], dim=1))
    return torch.cat(out, dim=0)


class ObjectiveGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose advantages and loss come from `train.objectives.<objective>`."""

    def __init__(self, *args, objective: str, objective_settings: ObjectiveSettings, refill_seed: int = 0,
                 logprob_chunk_tokens: int = 0, **kwargs):
        import trl

        if trl.__version__ != TRL_VERSION:
            raise RuntimeError(f"train/trainer.py is written against trl {TRL_VERSION}, found {trl.__version__}; "
                               "use the pinned environment (.envs/train or the train image)")
        super().__init__(*args, **kwargs)
        if self.accelerator.num_processes != 1:
            raise RuntimeError("ObjectiveGRPOTrainer runs on one process (one GPU or CPU), as the paper's runs do")
        self.objective = get(objective)
        self.settings = objective_settings
        self.refill_seed = refill_seed
        if logprob_chunk_tokens < 0:
            raise ValueError(f"logprob_chunk_tokens must be >= 0 (0: TRL's unchunked pass), got {logprob_chunk_tokens}")
        self.logprob_chunk_tokens = logprob_chunk_tokens  # train.logprob_chunk_tokens
        self.initial_entropy: float | None = None  # the objective's first-rollout statistic (GTPO H_ini)
        self._rollouts = 0
        self._last_rewards: torch.Tensor | None = None
        self._capture_entropy = False  # set while TRL computes rollout-time (old) log-probs
        self._captured: tuple | None = None
        gen = self.args.generation_kwargs or {}   # train.run.grpo_config puts data.stop_tokens there
        stops = gen.get("stop_token_ids", gen.get("eos_token_id", self.eos_token_id))
        self.stop_ids = sorted({stops} if isinstance(stops, int) else set(stops))
        use_policy_weights(self)  # vLLM: LoRA merged out of place; in sleep mode rollouts from the policy

    # ---- rollout side (once per generation batch) -------------------------------------------------

    def _generate_single_turn(self, prompts: list):
        """TRL's generation, each completion cut after its first stop token (data.stop_tokens). vLLM already
        stops there; TRL's transformers path keeps a row up to the tokenizer's EOS, so a row that stopped at
        <|im_end|> would keep the <|endoftext|> padding after it as a trained token."""
        prompt_ids, completion_ids, logprobs, extra = super()._generate_single_turn(prompts)
        stops = set(self.stop_ids)
        ends = [next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids)) for ids in completion_ids]
        completion_ids = [list(ids[:n]) for ids, n in zip(completion_ids, ends)]
        if logprobs is not None:
            logprobs = [lp[:n] for lp, n in zip(logprobs, ends)]
        return prompt_ids, completion_ids, logprobs, extra

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards = rewards[:, 0].clone()  # (N,) column 0 = the verifier reward
        return rewards

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, **kwargs):
        """Per-token log-probs and entropies (B, T) nats: TRL's pass, or with train.logprob_chunk_tokens > 0
        train/logprobs.py's (same numbers to rounding, no (B, T, V) logits tensor). During a rollout the no-grad
        old-log-prob pass also yields the rollout entropies (EP-GRPO, GTPO's H_ini), which saves a second
        policy forward."""
        capture = self._capture_entropy and not torch.is_grad_enabled()
        want = compute_entropy or capture
        if self.logprob_chunk_tokens > 0 and all(v is None for v in kwargs.values()):  # text only (no images)
            logps, ent = self._chunked_logps(model, input_ids, attention_mask, logits_to_keep, batch_size, want)
        else:
            logps, ent = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy=want, **kwargs)
        if capture:
            self._captured = (logps, ent)
        return logps, (ent if compute_entropy else None)

    def _chunked_logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size, want_entropy):
        """train/logprobs.py over TRL's row batches of `batch_size` (the rollout passes), else all rows."""
        step = batch_size or input_ids.size(0)
        parts = [token_logps_and_entropies(model, input_ids[i : i + step], attention_mask[i : i + step],
                                           logits_to_keep, self.temperature, want_entropy, self.logprob_chunk_tokens)
                 for i in range(0, input_ids.size(0), step)]
        logps = torch.cat([p[0] for p in parts])
        return logps, (torch.cat([p[1] for p in parts]) if want_entropy else None)

    def _scored_rollout(self, inputs) -> dict:
        self._capture_entropy, self._captured = self._needs_rollout_entropy(), None
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self._capture_entropy = False
        correct_trl_clipped(self._metrics["train" if self.model.training else "eval"],
                            *self._stop_truncated(out["completion_ids"], out["completion_mask"]))
        if self._captured is not None and "old_per_token_logps" in out:
            out["rcea_old_entropy"] = self._captured[1]
        out["rcea_rewards"] = self._last_rewards
        return out

    def _needs_rollout_entropy(self) -> bool:
        """Rollout entropies: every rollout for EP-GRPO, the first one for an objective freezing H_ini."""
        first = self.objective.needs_initial_entropy and self.initial_entropy is None
        return self.objective.needs_rollout_entropy or first

    def _generate_and_score_completions(self, inputs):
        out = self._scored_rollout(inputs)
        if not self.model.training:
            return self._add_objective_inputs(out, inputs)
        if self.objective.filters_groups and self.settings.dynamic_sampling:
            out = self._dynamic_sampling(out, inputs)
        out = self._add_objective_inputs(out, inputs)
        self._rollouts += 1
        return out

    def _group_ids(self, n: int) -> torch.Tensor:
        return torch.arange(n, device=self.accelerator.device) // self.num_generations

    def _dynamic_sampling(self, out: dict, inputs: list) -> dict:
        """DAPO: keep groups with 0 < #correct < G (verifier), refill from fresh prompts (docs/objectives.md#dapo)."""
        G = self.num_generations
        n_groups = out["completion_ids"].size(0) // G
        rng = random.Random(hash((self.refill_seed, self.state.global_step, self._rollouts)))
        # The paper's failure-window share: sampled completions in groups with nonzero reward variance, before the
        # filter and refill (after them every trained group is mixed: frac_nonzero_var is 1 by construction).
        first = out["rcea_rewards"].view(-1, G)
        mixed = (first.max(dim=1).values > first.min(dim=1).values).float().mean()
        self._metrics["train"]["frac_nonzero_var_sampled"].append(float(mixed))
        batches, kept = [out], []
        rounds = 0
        while True:
            cur = batches[-1]
            r = cur["rcea_rewards"].view(-1, G)
            for g in range(r.size(0)):
                if r[g].max() > r[g].min():
                    kept.append((len(batches) - 1, g))
            if len(kept) >= n_groups or rounds >= self.settings.max_num_gen_batches:
                break
            rounds += 1
            idx = rng.sample(range(len(self.train_dataset)), n_groups)
            fresh = [dict(self.train_dataset[i]) for i in idx for _ in range(G)]
            batches.append(self._scored_rollout(fresh))
        self._metrics["train"]["dapo/refill_rounds"].append(float(rounds))
        if not kept:  # nothing learnable: keep the batch, prepare() gives keep = False everywhere
            return out
        kept = (kept * n_groups)[:n_groups]  # at the limit: pad with duplicated kept groups
        rows = [(b, g * G + j) for b, g in kept for j in range(G)]
        merged = {}
        pad = self.pad_token_id
        for key, value in out.items():
            if not isinstance(value, torch.Tensor) or value.ndim == 0:
                continue
            parts = [batches[b][key][i : i + 1] for b, i in rows]
            if value.ndim == 1:
                merged[key] = torch.cat(parts)
            else:
                fill = pad if key in ("prompt_ids", "completion_ids") else 0
                merged[key] = _pad_cat(parts, fill, left=key.startswith("prompt"))
        merged["num_items_in_batch"] = merged["completion_mask"].sum()
        return merged

    @torch.no_grad()
    def _rollout_forward(self, out: dict, with_ref: bool, with_entropy: bool) -> dict:
        """Rollout-time log-probs / entropies of the policy and of the base model (adapter disabled)."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        keep = out["completion_ids"].size(1)
        bs = self.args.per_device_train_batch_size
        res = {}
        if with_entropy:
            res["old_logp"], res["old_entropy"] = self._get_per_token_logps_and_entropies(
                self.model, ids, attn, keep, bs, compute_entropy=True)
        if with_ref:
            with use_adapter(self.accelerator.unwrap_model(self.model), adapter_name=None):
                res["ref_logp"], _ = self._get_per_token_logps_and_entropies(self.model, ids, attn, keep, bs)
        return res

    def _add_objective_inputs(self, out: dict, inputs: list) -> dict:
        mask = out["completion_mask"].float()
        if "tool_mask" in out:
            mask = mask * out["tool_mask"]
        need_entropy = self._needs_rollout_entropy() and "rcea_old_entropy" not in out
        freeze = self.objective.needs_initial_entropy and self.initial_entropy is None and self.model.training
        extra = self._rollout_forward(out, self.objective.needs_ref, need_entropy)
        if "rcea_old_entropy" in out:  # captured from TRL's own old-log-prob pass
            extra["old_entropy"] = out.pop("rcea_old_entropy")
        if freeze:
            self.initial_entropy = self.objective.initial_entropy(extra["old_entropy"], mask)
        old = out.get("old_per_token_logps", extra.get("old_logp"))
        if out.get("sampling_per_token_logps") is not None and not self.vllm_importance_sampling_correction:
            policy = old if old is not None else self._rollout_forward(out, False, True)["old_logp"]
            self._log_sampling_gap(out["sampling_per_token_logps"], policy, mask)
        rollout = {
            "rewards": out["rcea_rewards"], "group_ids": self._group_ids(mask.size(0)), "mask": mask,
            "completion_ids": out["completion_ids"], "old_logp": old,
            "ref_logp": extra.get("ref_logp"), "old_entropy": extra.get("old_entropy"),
        }
        prep = self.objective.prepare(rollout, self.settings)
        mode = "train" if self.model.training else "eval"
        self.objective.check_metrics(prep.get("metrics", {}))
        for k, v in prep.pop("metrics", {}).items():
            self._metrics[mode][k].append(v)
        self._log_rollout_metrics(out, mask, mode)
        out["advantages"] = prep.pop("advantages").float()
        keep = prep.pop("keep")
        out["rcea_keep"] = keep
        for k, v in prep.items():
            out[f"rcea_{k}"] = v
        if extra.get("ref_logp") is not None:
            out["rcea_ref_logp"] = extra["ref_logp"]
        out["num_items_in_batch"] = (mask * keep.unsqueeze(1)).sum()  # TOK denominator of the whole batch
        return out

    def _log_sampling_gap(self, sampled: torch.Tensor, policy: torch.Tensor, mask: torch.Tensor) -> None:
        """|log p of the sampler (vLLM) - log p of the policy| on the rollout's tokens: near 0 when the engine
        samples from the policy; as large as one update when it samples from stale weights (train/vllm_sync.py)."""
        gap = (sampled - policy).abs()[mask > 0]
        m = self._metrics["train" if self.model.training else "eval"]
        m[GAP_MEAN].append(float(gap.mean()) if gap.numel() else 0.0)
        m[GAP_MAX].append(float(gap.max()) if gap.numel() else 0.0)

    def _log_rollout_metrics(self, out: dict, mask: torch.Tensor, mode: str) -> None:
        ids = out["completion_ids"]
        lengths, truncated = self._stop_truncated(ids, mask)
        texts = self.processing_class.batch_decode(ids, skip_special_tokens=True)
        m = self._metrics[mode]
        m["response_length"].append(float(lengths.mean()))
        m["truncation_rate"].append(float(truncated.float().mean()))
        m["boxed_rate"].append(sum("\\boxed{" in t for t in texts) / max(len(texts), 1))

    def _stop_truncated(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Completion lengths (B,) and whether each (B,) bool fails to end at a stop token (data.stop_tokens)."""
        lengths = mask.sum(-1)
        last = ids.gather(1, (lengths.long() - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        return lengths, ~torch.isin(last, torch.tensor(self.stop_ids, device=last.device)) & (lengths > 0)

    # ---- loss side (per micro-batch) --------------------------------------------------------------

    def _compute_loss(self, model, inputs):
        """The micro-batch loss: TRL's current-policy pass, then `objective_loss` (the one loss function)."""
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep = completion_ids.size(1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        logps, entropies = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, compute_entropy=True)  # (B, T), (B, T) nats
        old = inputs.get("old_per_token_logps")
        mask = mask.float() * inputs["rcea_keep"].float().unsqueeze(1)
        rcea = {k[5:]: v for k, v in inputs.items() if k.startswith("rcea_")}
        tb = token_batch({**rcea, "logp": logps, "old_logp": logps.detach() if old is None else old,
                          "entropy": entropies, "mask": mask, "completion_ids": completion_ids,
                          "advantages": inputs["advantages"]}, self.initial_entropy)
        mode = "train" if self.model.training else "eval"
        norm = Normalisers(tok=inputs["num_items_in_batch"],
                           ga=self.current_gradient_accumulation_steps if mode == "train" else 1)
        loss, metrics = objective_loss(self.objective, tb, self.settings, norm)
        m = self._metrics[mode]
        n = mask.sum().clamp(min=1.0)
        m["entropy"].append(float((entropies * mask).sum() / n))
        self.objective.check_metrics(metrics)
        for key, value in metrics.items():  # the objective's own names only (registry: metrics=...)
            m[key].append(float(value))
        return loss

    # ---- checkpoints: everything needed to resume mid-rollout -------------------------------------

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        ckpt = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        torch.save({"initial_entropy": self.initial_entropy, "step": self._step, "rollouts": self._rollouts,
                    "buffered_inputs": self._buffered_inputs}, ckpt / TRAINER_STATE)

    def load_objective_state(self, checkpoint: str | Path) -> None:
        state = torch.load(Path(checkpoint) / TRAINER_STATE, weights_only=False)
        self.initial_entropy = state["initial_entropy"]
        self._step, self._rollouts, self._buffered_inputs = state["step"], state["rollouts"], state["buffered_inputs"]


def dump_hashes() -> str:
    return json.dumps(trl_method_hashes(), indent=2)


def correct_trl_clipped(m: dict, lengths: torch.Tensor, truncated: torch.Tensor) -> None:
    """TRL 0.29.0 logs `completions/clipped_ratio` and the terminated lengths with "terminated" meaning "ends
    at the tokenizer's EOS or padding", so a completion that stops at <|im_end|> (data.stop_tokens) counts as
    clipped. This rewrites the values TRL just appended for this rollout with the stop set's meaning: clipped
    = no stop token at the end, as `truncation_rate` (lengths (B,) tokens, truncated (B,) bool)."""
    if not m.get("completions/clipped_ratio"):
        return
    m["completions/clipped_ratio"][-1] = float(truncated.float().mean())
    done = lengths[~truncated].float()
    if done.numel() == 0:  # as TRL: no terminated completion -> zeros
        done = torch.zeros(1)
    for key, value in (("mean", done.mean()), ("min", done.min()), ("max", done.max())):
        if m.get(f"completions/{key}_terminated_length"):
            m[f"completions/{key}_terminated_length"][-1] = float(value)
