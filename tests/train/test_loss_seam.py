"""The objective seam: the loss the trainer optimises is `batch_loss`, and GA splitting does not change it.

A real tiny training step (TRL 0.29 + the tiny model) is observed through the registry: the rollout that
reaches `prepare`, the token batch that reaches `token_loss` and the scalar `_compute_loss` returns.
"""

import dataclasses

import pytest
import torch
from transformers import TrainerCallback

import train.trainer as trainer_module
from rcea.config import load_config
from train.objectives import NAMES, Normalisers, batch_loss, get, objective_loss, token_batch
from train.run import run_training

# One optimizer step of the untrained tiny model (no warm start: the seam does not need a good policy,
# and the synthetic reward gives every rollout mixed groups).
ONE_STEP = ["train.max_completion_tokens=8", "train.warmup_ratio=0.0", "train.weight_decay=0.0",
            "train.max_steps=1", "data.draw_size=32", "toy.warm_start_steps=0"]


class Recorder:
    """Wraps the registered objective: keeps the first training rollout, token batch and loss."""

    def __init__(self, monkeypatch):
        self.rollout = self.tb = self.loss = None
        self.settings = None
        self.grads: dict[str, torch.Tensor] = {}
        real_get, real_loss = trainer_module.get, trainer_module.ObjectiveGRPOTrainer._compute_loss
        rec = self

        def recording_get(name):
            obj = real_get(name)

            def prepare(rollout, s):
                if rec.rollout is None:
                    rec.rollout = {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                                   for k, v in rollout.items()}
                    rec.settings = s
                return obj.prepare(rollout, s)

            def token_loss(tb, s):
                if rec.tb is None:
                    rec.tb = dataclasses.replace(tb, logp=tb.logp.detach().clone(),
                                                 entropy=tb.entropy.detach().clone())
                return obj.token_loss(tb, s)

            return dataclasses.replace(obj, prepare=prepare, token_loss=token_loss)

        def compute_loss(self_, model, inputs):
            loss = real_loss(self_, model, inputs)
            if rec.loss is None:
                rec.loss = float(loss.detach())
            return loss

        monkeypatch.setattr(trainer_module, "get", recording_get)
        monkeypatch.setattr(trainer_module.ObjectiveGRPOTrainer, "_compute_loss", compute_loss)

    def callback(self) -> TrainerCallback:
        rec = self

        class Grads(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
                if not rec.grads:
                    rec.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                                 if p.requires_grad and p.grad is not None}

        return Grads()


@pytest.mark.parametrize("method", NAMES)
def test_trainer_loss_is_batch_loss_on_the_same_rollout(method, tmp_path, monkeypatch):
    # One micro-batch (32 rows = 4 groups of 8, grad_accum 1) so the trainer's loss is one batch_loss;
    # TRL's row shuffle before splitting is switched off so the rows keep the rollout's order.
    monkeypatch.setattr("trl.trainer.grpo_trainer.shuffle_sequence_dict", lambda d: d)
    rec = Recorder(monkeypatch)
    cfg = load_config("tiny", method, ONE_STEP)
    run_training(cfg, tmp_path, reward="synthetic", log=lambda _: None)
    r, tb = rec.rollout, rec.tb
    assert r["mask"].shape == tb.logp.shape == (32, 8)
    batch = {**r, "logp": tb.logp, "entropy": tb.entropy}
    if tb.initial_entropy is not None:
        batch["initial_entropy"] = tb.initial_entropy
    torch.manual_seed(0)  # Clip-Cov's draw (only used if more candidates than n)
    expected, _ = batch_loss(method, batch, **rec.settings.as_dict())
    assert rec.loss == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    assert float(r["rewards"].std()) > 0  # a rollout with signal, so the equality is not 0 == 0


# ---- gradient accumulation -------------------------------------------------------------------------

# Objectives whose loss is a sum over rows/tokens with batch-level normalisers: splitting the optimizer
# batch into GA micro-batches must not change it. Clip-Cov and KL-Cov select tokens by a covariance
# centred within each micro-batch, and Archer's KL terms are means over each micro-batch's token subsets
# (as in verl, where these objectives come from): for them the split is part of the definition.
SPLIT_FREE = ("grpo", "dapo", "ep_grpo", "gtpo")


def _split_grads(method: str, batch: dict, settings: dict, k: int) -> tuple[float, torch.Tensor]:
    """Loss and d loss / d logp when the batch's rows are cut into k equal GA micro-batches (rollout
    work once on the whole batch, as the trainer does)."""
    obj = get(method)
    logp = batch["logp"].clone().requires_grad_(True)
    rollout = {key: batch[key] for key in ("rewards", "group_ids", "mask", "completion_ids", "old_logp",
                                           "ref_logp", "old_entropy") if key in batch}
    prep = obj.prepare(rollout, settings)
    prep.pop("metrics")
    keep = prep.pop("keep")
    mask = batch["mask"] * keep.to(batch["mask"].dtype).unsqueeze(1)
    n_tok = mask.sum()
    h_ini = obj.initial_entropy(batch["entropy"], batch["mask"]) if obj.needs_initial_entropy else None
    B = mask.size(0)
    total = 0.0
    for rows in torch.arange(B).chunk(k):
        part = {"logp": logp[rows], "old_logp": batch["old_logp"][rows], "entropy": batch["entropy"][rows],
                "mask": mask[rows], "completion_ids": batch["completion_ids"][rows],
                "ref_logp": batch["ref_logp"][rows], **{key: v[rows] for key, v in prep.items()}}
        loss, _ = objective_loss(obj, token_batch(part, h_ini), settings, Normalisers(tok=n_tok, ga=k))
        loss.backward()
        total += float(loss.detach())
    return total, logp.grad


@pytest.mark.parametrize("method", SPLIT_FREE)
def test_loss_and_gradients_do_not_depend_on_the_ga_split(method):
    from tests.train.batches import random_batch
    from train.objectives import resolve_settings

    batch = random_batch(21, groups=4, G=4, T_max=9)  # 16 rows: micro-batches of 16, 8 and 4 rows
    batch["rewards"][:4] = 1.0  # one all-correct group: DAPO drops it (rows kept in B, tokens masked)
    settings = resolve_settings(method, {"max_completion_length": 8} if method == "dapo" else {})
    loss1, grad1 = _split_grads(method, batch, settings, 1)
    whole, _ = batch_loss(method, batch, **settings.as_dict())  # the oracle-tested entry on the same batch
    assert loss1 == pytest.approx(float(whole), abs=1e-12)
    assert float(grad1.abs().max()) > 0
    for k in (2, 4):
        loss_k, grad_k = _split_grads(method, batch, settings, k)
        assert loss_k == pytest.approx(loss1, abs=1e-9), f"{method}: loss with {k} micro-batches"
        torch.testing.assert_close(grad_k, grad1, rtol=0, atol=1e-6, msg=f"{method}: gradient with {k}")


def test_covariance_objectives_select_within_each_micro_batch():
    """The documented exception: KL-Cov's top-k is taken per micro-batch, so the split changes the loss."""
    from tests.train.batches import random_batch
    from train.objectives import resolve_settings

    batch = random_batch(22, groups=4, G=4, T_max=9)
    s = resolve_settings("kl_cov", {"kl_cov_ratio": 0.05})
    loss1, _ = _split_grads("kl_cov", batch, s, 1)
    loss4, _ = _split_grads("kl_cov", batch, s, 4)
    assert abs(loss4 - loss1) > 1e-6


@pytest.mark.parametrize("method", ["grpo", "dapo"])
def test_trainer_gradients_do_not_depend_on_the_ga_split(method, tmp_path, monkeypatch):
    """The same first rollout (32 rows) trained as 1 x 32, 2 x 16 and 4 x 8 rows: equal LoRA gradients."""
    grads, rollouts = [], []
    for batch, ga in ((32, 1), (16, 2), (8, 4)):
        with monkeypatch.context() as mp:
            rec = Recorder(mp)
            cfg = load_config("tiny", method, ONE_STEP + [f"train.per_device_batch={batch}",
                                                          f"train.grad_accum={ga}"])
            run_training(cfg, tmp_path / str(ga), reward="synthetic", callbacks=[rec.callback()],
                         log=lambda _: None)
        grads.append(rec.grads)
        rollouts.append(rec.rollout)
    for r in rollouts[1:]:
        assert torch.equal(r["completion_ids"], rollouts[0]["completion_ids"])  # the same rollout
    assert grads[0] and any(float(g.abs().max()) > 0 for g in grads[0].values())
    for g in grads[1:]:
        for name, value in grads[0].items():
            torch.testing.assert_close(g[name], value, rtol=0, atol=1e-6, msg=f"{method}: {name}")
