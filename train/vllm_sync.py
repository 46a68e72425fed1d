"""Colocated vLLM in sleep mode under TRL 0.29.0: every rollout is sampled from the policy's current weights.

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
"reload_weights" request loads the policy's weights (TRL's own `sync_weights`) when the engine's weights
were discarded since the last sync, and does nothing when they were just synced. Loading the policy
restores every engine parameter because `sync_weights` sends every parameter of the merged model (frozen
ones included; vLLM's worker restores its buffers itself on wake-up), so no disk read is needed: it also
saves re-reading the 15 GB 7B checkpoint per rollout. Other TRL versions are refused by train/trainer.py.
"""

from __future__ import annotations

from trl.generation.vllm_generation import VLLMGeneration


class PolicySyncedVLLM(VLLMGeneration):
    """TRL's VLLMGeneration whose sleep-mode `generate` samples from the policy, not the checkpoint."""

    weights_current = False  # the engine holds the policy's weights (a level-2 sleep discards them)
    policy_loads = 0  # weight loads done in place of TRL's reload_weights (read by tests and the device check)

    def sync_weights(self):
        super().sync_weights()
        self.weights_current = True

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
    """Give a trainer's colocated sleep-mode engine the policy's weights for every rollout (no-op otherwise)."""
    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or not trainer.use_vllm or not (gen.mode == "colocate" and gen.enable_sleep_mode):
        return
    if type(gen) is not VLLMGeneration:
        raise RuntimeError(f"expected TRL's VLLMGeneration, found {type(gen).__name__}")
    gen.__class__ = PolicySyncedVLLM  # same object and state, our two methods
    gen.weights_current = False  # TRL's _init_vllm ends with sleep(level=2)
