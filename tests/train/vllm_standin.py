"""A recording stand-in for vLLM 0.11's offline `LLM`, for driving TRL 0.29.0's real colocated-generation code
(trl/generation/vllm_generation.py) on CPU, where the vLLM GPU wheel cannot run.

It behaves as vLLM 0.11 does where the rollout weights are concerned:
  LLM(model=path, enable_sleep_mode=...)   loads the checkpoint at `path` (a Hugging Face folder);
  sleep(level=2)                          discards the weights (here: overwritten with NaN = undefined memory);
  wake_up(tags)                           maps memory back, contents undefined; waking an awake tag is a no-op
                                          (vLLM's executor warns and returns);
  collective_rpc("reload_weights")        re-reads the checkpoint from disk (gpu_model_runner.reload_weights);
  llm_engine...model_runner.model.load_weights([(name, tensor)])   copies tensors in by name (unknown names fail);
  chat(conversations, sampling_params)    samples with the weights it holds and returns the sampled tokens'
                                          processed log-probs (log_softmax(logits / temperature)).
Every generating call hands the engine's model to `on_generate(model)`, so a test can compare the weights the
rollout was sampled from with the policy being trained at that moment.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch


class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class _Runner:
    def __init__(self, engine: "StandInLLM"):
        self.engine = engine

    @property
    def model(self):
        return self  # TRL calls model_runner.model.load_weights(...)

    def load_weights(self, weights):
        params = dict(self.engine.model.named_parameters())
        for name, tensor in weights:
            if name not in params:
                raise KeyError(f"the engine has no parameter {name!r}")
            with torch.no_grad():
                params[name].copy_(tensor.to(params[name].dtype))
            self.engine.events.append(("load_weights", name))


class StandInLLM:
    instances: list["StandInLLM"] = []
    on_generate = None  # set by a test: called with the engine's model at every generating call

    def __init__(self, model: str, enable_sleep_mode: bool = False, seed: int = 0, **kwargs):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path, self.kwargs, self.events = model, kwargs, []
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.sleep_mode, self.asleep = enable_sleep_mode, set()
        self.generator = torch.Generator().manual_seed(seed)
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(
            driver_worker=SimpleNamespace(model_runner=_Runner(self))))
        StandInLLM.instances.append(self)

    # ---- sleep mode ---------------------------------------------------------------------------------
    def sleep(self, level: int = 1):
        assert self.sleep_mode, "sleep() needs enable_sleep_mode=True"
        self.events.append(("sleep", level))
        if level == 2:
            with torch.no_grad():
                for p in self.model.parameters():
                    p.fill_(float("nan"))
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags or ())))
        self.asleep -= set(tags or ("weights", "kv_cache"))

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.events.append(("collective_rpc", method))
        if method != "reload_weights":
            raise NotImplementedError(method)
        self._reload_from_disk()
        return [None]

    def _reload_from_disk(self):
        from transformers import AutoModelForCausalLM

        disk = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32)
        self.model.load_state_dict(disk.state_dict())

    def reset_prefix_cache(self):
        self.events.append(("reset_prefix_cache",))
        return True

    # ---- generation -----------------------------------------------------------------------------------
    def chat(self, conversations, sampling_params, use_tqdm=False, chat_template_kwargs=None, tools=None,
             chat_template=None):
        prompts = [self.tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                                      **(chat_template_kwargs or {})) for c in conversations]
        return self.generate(prompts, sampling_params)

    @torch.no_grad()
    def generate(self, prompts, sampling_params, use_tqdm=False):
        assert not self.asleep, f"generate while {sorted(self.asleep)} asleep"
        self.events.append(("generate", len(prompts)))
        if StandInLLM.on_generate is not None:
            StandInLLM.on_generate(self.model)
        sp = sampling_params   # vLLM stops at the tokenizer's EOS and at every id of stop_token_ids
        eos = {self.tokenizer.eos_token_id, *(getattr(sp, "stop_token_ids", None) or [])}
        outputs = []
        for prompt in prompts:
            ids = [int(i) for i in (prompt["input_ids"] if hasattr(prompt, "keys") else prompt)]
            new, logprobs = [], []
            for _ in range(sp.max_tokens):
                logits = self.model(torch.tensor([ids + new])).logits[0, -1].float() / sp.temperature
                lp = torch.log_softmax(logits, -1)
                tok = int(torch.multinomial(lp.exp(), 1, generator=self.generator))
                new.append(tok)
                logprobs.append({tok: SimpleNamespace(logprob=float(lp[tok]), rank=1)})
                if tok in eos:
                    break
            outputs.append(SimpleNamespace(prompt_token_ids=ids, outputs=[
                SimpleNamespace(token_ids=new, logprobs=logprobs if sp.logprobs is not None else None)]))
        return outputs


def install(monkeypatch) -> type[StandInLLM]:
    """Make TRL's vllm_generation module build the stand-in where it would build vLLM's LLM."""
    import trl.generation.vllm_generation as vg

    StandInLLM.instances, StandInLLM.on_generate = [], None
    monkeypatch.setattr(vg, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vg, "LLM", StandInLLM, raising=False)
    monkeypatch.setattr(vg, "SamplingParams", SamplingParams, raising=False)
    monkeypatch.setattr(vg, "vllm", SimpleNamespace(__version__="0.11.0"), raising=False)
    return StandInLLM
