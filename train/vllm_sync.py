"""The policy's weights into TRL 0.29.0's vLLM engine: every rollout sampled from the policy being trained (sleep
mode), and the frozen base left bit-identical by the sync (every mode; "Merged weights out of place" below).

What TRL 0.29.0 does with `vllm_enable_sleep_mode` (trl/generation/vllm_generation.py), per rollout:
    sync_weights():  wake_up(tags=["weights"]); load_weights(merged LoRA policy, every parameter)
    generate():      wake_up(tags=["weights"])            (a no-op: the engine is awake)
                     collective_rpc("reload_weights")     (work-around for vLLM issue 29341)
                     wake_up(tags=["kv_cache"]); chat(...); sleep(level=2)
In vLLM 0.11 `reload_weights` (v1/worker/gpu_model_runner.py) reads the checkpoint from disk into the
engine, overwriting what `sync_weights` just loaded: every rollout comes from the base model (TRL issue
5312, fixed upstream after 0.29.0). The re-read is needed only when nothing loaded weights since the last
level-2 sleep (which discards them): TRL's `generate` can run without a `sync_weights` before it (a second
rollout inside one optimizer step, as DAPO's refills; evaluation), and then the engine holds undefined
memory.

`PolicySyncedVLLM` keeps TRL's call order and replaces that one call: inside `generate`, the
"reload_weights" request loads the policy's weights (`sync_weights`) when the engine's weights
were discarded since the last sync, and does nothing when they were just synced. Loading the policy
restores every engine parameter because `sync_weights` sends every parameter of the merged model (frozen
ones included; vLLM's worker restores its buffers itself on wake-up), so no disk read is needed: it also
saves re-reading the 15 GB 7B checkpoint per rollout. Other TRL versions are refused by train/trainer.py.

Merged weights out of place (every colocated engine, sleep mode or not). TRL 0.29.0's `sync_weights` sends
the LoRA policy by merging the adapter into the frozen base in place and unmerging it afterwards (PEFT
0.18.1 `LoraLayer.merge`: `weight.data += delta`, `unmerge`: `weight.data -= delta`). In bf16 each of the two
steps rounds, so the base is not restored: the error accumulates over the run's syncs (about 1,000 at 3B,
2,000 at 7B, plus one per DAPO refill) and the policy being trained becomes drifted base + LoRA, while the
inference role evaluates the saved adapter on the pristine base and the reference passes read the drifted
base (measured on the tiny bf16 model in docs/objectives.md, "bf16 weight sync"). `sync_weights` here never
writes the base: for each LoRA layer it computes base + scaling * B @ A in fp32, rounds it once to the
base's dtype and sends that tensor; every other parameter is sent as it is. Of the two ways to keep the
base exact this is the cheaper one: restoring a saved copy after the unmerge would hold a second copy of
every targeted weight (LoRA covers every projection: about 5.5 GB at 3B, 13 GB at 7B in bf16), while the
out-of-place merge holds one layer's fp32 sum at a time (6 bytes per weight, at most about 0.4 GB for a
7B MLP projection of 18,944 x 3,584), freed once the engine has copied it. It is also more exact: one
rounding of the true sum, where the in-place merge rounds the drifted base plus the delta.
"""

from __future__ import annotations

import torch
from accelerate.utils import is_peft_model
from trl.generation.vllm_generation import VLLMGeneration, empty_cache


def merged_weight(layer) -> torch.Tensor:
    """A PEFT LoRA layer's merged weight, base + sum over active adapters of scaling * B @ A, summed in fp32 and
    rounded once to the base's dtype; the base weight and the adapter are left untouched."""
    base = layer.get_base_layer().weight
    if layer.merged:
        raise RuntimeError("a LoRA layer is merged into its base already; the sync would add its update twice")
    out = base.detach().float()  # a copy (or, for an fp32 base, a view: cloned below before writing)
    if out.data_ptr() == base.data_ptr():
        out = out.clone()
    view = out.T if layer.fan_in_fan_out else out
    for name in layer.active_adapters:
        if name not in layer.lora_A:
            continue
        if name in layer.lora_variant or layer.lora_bias[name]:
            raise RuntimeError(f"adapter {name!r} is not plain LoRA (DoRA / aLoRA / lora_bias): its merge is "
                               "not computed here; use plain LoRA (train.lora_*)")
        view.addmm_(layer.lora_B[name].weight.float(), layer.lora_A[name].weight.float(), alpha=layer.scaling[name])
    return out.to(base.dtype)


def policy_weights(model):
    """(engine parameter name, tensor) of every parameter of the merged policy, as TRL 0.29.0's sync names them
    (PEFT wrapper prefixes and `.base_layer` removed, adapter tensors skipped); LoRA layers' weights merged
    out of place (`merged_weight`), one at a time."""
    from peft.tuners.lora import LoraLayer

    owner = {id(m.get_base_layer().weight): m for m in model.modules() if isinstance(m, LoraLayer)}
    for name, param in model.named_parameters():
        name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        if model.prefix in name or "original_module" in name:
            continue
        for prefix in ("_checkpoint_wrapped_module.", "modules_to_save.default."):
            name = name.replace(prefix, "")
        layer = owner.get(id(param))
        yield name, (merged_weight(layer) if layer is not None else param.data)


class PolicySyncedVLLM(VLLMGeneration):
    """TRL's VLLMGeneration whose sync merges LoRA out of place and whose sleep-mode `generate` samples from
    the policy, not the checkpoint."""

    weights_current = False  # the engine holds the policy's weights (a level-2 sleep discards them)
    policy_loads = 0  # weight loads done in place of TRL's reload_weights (read by tests and the device check)

    def sync_weights(self):
        if is_peft_model(self.model):
            self._sync_merged_out_of_place()
        else:  # a full model: TRL sends its parameters as they are (no merge)
            super().sync_weights()
        self.weights_current = True

    def _sync_merged_out_of_place(self):
        """TRL 0.29.0's PEFT sync on one process, with `policy_weights` in place of merge / send / unmerge."""
        plugin = self.accelerator.state.deepspeed_plugin
        if self.is_fsdp_enabled or (plugin is not None and plugin.zero_stage == 3):
            raise RuntimeError("train/vllm_sync.py syncs an unsharded PEFT model (one process, as the study runs)")
        if self.mode == "colocate" and self.enable_sleep_mode:
            empty_cache()
            self.llm.wake_up(tags=["weights"])
        with torch.no_grad():
            for name, tensor in policy_weights(self.model):
                if self.mode == "server":
                    if self.accelerator.is_main_process:
                        self.vllm_client.update_named_param(name, tensor)
                else:
                    self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights([(name, tensor)])
        if self.mode == "server":
            if self.accelerator.is_main_process:
                self.vllm_client.reset_prefix_cache()
        else:
            self.llm.reset_prefix_cache()

    def generate(self, prompts, num_generations, profiler=None):
        if not (self.mode == "colocate" and self.enable_sleep_mode):
            return super().generate(prompts, num_generations, profiler)
        llm = self.llm
        engine_rpc = llm.collective_rpc

        def rpc(method, *args, **kwargs):
            if method != "reload_weights":
                return engine_rpc(method, *args, **kwargs)
            if not self.weights_current:
                self.sync_weights()
                self.policy_loads += 1
            return []

        llm.collective_rpc = rpc  # only for this call: TRL's generate asks for the reload through it
        try:
            return super().generate(prompts, num_generations, profiler)
        finally:
            del llm.collective_rpc
            self.weights_current = False  # TRL's generate ends with sleep(level=2)


def use_policy_weights(trainer) -> None:
    """Give a trainer's vLLM engine the policy's weights for every rollout, merged out of place (every vLLM
    mode), and loaded in place of the checkpoint re-read in colocated sleep mode (no-op without vLLM)."""
    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or not trainer.use_vllm:
        return
    if type(gen) is not VLLMGeneration:
        raise RuntimeError(f"expected TRL's VLLMGeneration, found {type(gen).__name__}")
    gen.__class__ = PolicySyncedVLLM  # same object and state, our two methods
    gen.weights_current = False  # in sleep mode TRL's _init_vllm ends with sleep(level=2)
