"""Transformers backend: seeded batched sampling with a KV cache, and chunked teacher-forced scoring.

Sampling draws each row with its own `torch.Generator(seed)`, so a completion depends only on its prompt,
its seed and the batch it was decoded in (jobs use fixed batches, so reruns are identical).
A completion ends at the first stop token (`stop_tokens`: the run's data.stop_tokens, kept as its last token;
without it, the model's own EOS set: its generation config's and its tokenizer's). LoRA adapters go through Transformers' PEFT integration (`load_adapter` / `set_adapter`); at most
`max_adapters` stay loaded. A full model folder (`set_model`: an outside run's merged checkpoint) is loaded as
a second model beside the base, in the base's dtype, with the base's tokenizer and stop set; one at a time. Scoring runs the decoder once per batch and projects hidden states to the
vocabulary in chunks of positions (`infer.entropy`), so no (T, V) matrix is ever held whole; the
projection runs in fp32 whatever the model dtype (bf16 on GPU).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Sequence

import torch

from infer.backends.base import Completion, SamplingSpec, Scored
from infer.entropy import chunked_stats_from_hidden


class HFBackend:
    def __init__(self, model_path: str, device: str = "cpu", dtype: str = "auto", batch_size: int = 8,
                 chunk: int = 256, max_adapters: int = 2, revision: str | None = None,
                 stop_tokens: Sequence[str] | None = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()   # load_adapter reports the new adapter's keys as "MISSING" before loading them

        device_ = torch.device(device)
        if dtype == "auto":
            dtype = "bfloat16" if device_.type == "cuda" else "float32"
        kw = {"revision": revision} if revision else {}
        tokenizer = AutoTokenizer.from_pretrained(model_path, **kw)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype), **kw).to(device_)
        self._setup(model, tokenizer, device_, batch_size, chunk, max_adapters, name=model_path, stop_tokens=stop_tokens)

    @classmethod
    def from_model(cls, model, tokenizer=None, batch_size: int = 8, chunk: int = 256,
                   max_adapters: int = 2, stop_tokens: Sequence[str] | None = None) -> "HFBackend":
        """A backend around a model already in memory (gpu_check's random-initialised real shapes)."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, next(model.parameters()).device, batch_size, chunk, max_adapters,
                    name=type(model).__name__, stop_tokens=stop_tokens)
        return self

    def _setup(self, model, tokenizer, device, batch_size, chunk, max_adapters, name, stop_tokens=None) -> None:
        self.device, self.tokenizer, self.model = device, tokenizer, model
        self.model.eval()
        # Frozen from the start, as PEFT leaves the base weights once an adapter is loaded: whether a weight
        # requires grad picks the matmul path of a strided (B, 1, H) input (the lm_head at each decoding step),
        # so sampled log-probs differed by ~1e-6 between a worker's first base job and one after an adapter job.
        self.model.requires_grad_(False)
        self.batch_size, self.chunk, self.max_adapters = batch_size, chunk, max_adapters
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        if stop_tokens is not None:   # the run's stop set (rcea.data.stop_ids_of checks it against the tokenizer)
            if tokenizer is None:
                raise ValueError(f"{name}: stop tokens need the model's tokenizer")
            from rcea.data import stop_ids_of

            eos = stop_ids_of(tokenizer, list(stop_tokens))
        else:
            eos = self.model.generation_config.eos_token_id
            eos = [eos] if isinstance(eos, int) else list(eos or [])
            if tokenizer is not None and tokenizer.eos_token_id is not None:
                eos.append(tokenizer.eos_token_id)
        self.eos_ids = sorted(set(eos))   # the stop ids: a completion ends at the first of them
        if not self.eos_ids:
            raise ValueError(f"{name}: neither the generation config nor the tokenizer names an EOS token")
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        self.pad_id = pad if pad is not None else self.eos_ids[0]
        self._adapters: list[str] = []   # loaded adapter names, least recently used first
        self.adapter: str | None = None
        self._base = model                # the model adapters go over; `set_model` swaps another in for a while
        self._full: tuple[str, object] | None = None   # (what identifies its files, the model) of the loaded full one
        self.model_folder: str | None = None

    # ----------------------------------------------------------------- adapters
    def set_adapter(self, adapter: str | None) -> None:
        self.model, self.model_folder = self._base, None   # adapters (and None) are over the base
        if adapter is None:
            if self._adapters:
                self.model.disable_adapters()
            self.adapter = None
            return
        path = Path(adapter)
        if not (path / "adapter_config.json").exists():
            raise FileNotFoundError(f"{path} is not a LoRA adapter folder (no adapter_config.json); "
                                    "was the checkpoint written completely?")
        name = f"a{zlib.crc32(str(path.resolve()).encode()):08x}"
        if name not in self._adapters:
            while len(self._adapters) >= self.max_adapters:
                self.model.delete_adapter(self._adapters.pop(0))
            self.model.load_adapter(str(path), adapter_name=name)
        else:
            self._adapters.remove(name)
        self._adapters.append(name)
        self.model.set_adapter(name)
        self.model.enable_adapters()
        self.adapter = str(path)

    def set_model(self, model: str | None) -> None:
        """Use the full model folder `model` itself for later calls, no adapter (None: the base policy). Its
        weights only: the tokenizer and the stop set stay the base's (infer.outside checked the vocabulary, and
        a folder may hold no tokenizer). The last one asked for stays loaded, keyed by its files (a folder
        rewritten in place is loaded again)."""
        if model is None:
            self.set_adapter(None)
            return
        from infer.backends.vllm_args import adapter_key

        key = adapter_key(model)
        if self._full is None or self._full[0] != key:
            self._full = None      # free the previous one before loading: never two full models beside the base
            self.model = self._base
            _release(self.device)
            from transformers import AutoModelForCausalLM

            loaded = AutoModelForCausalLM.from_pretrained(model, dtype=self._base.dtype).to(self.device)
            loaded.eval()
            loaded.requires_grad_(False)   # as the base (see _setup)
            rows = int(loaded.get_output_embeddings().weight.shape[0])
            if rows != self.vocab_size:
                raise ValueError(f"{model}: its output layer has {rows} rows but the base's has {self.vocab_size}; "
                                 "measure it over the base it was trained from")
            self._full = (key, loaded)
        self.model, self.adapter, self.model_folder = self._full[1], None, str(model)

    def to(self, device) -> None:
        """Move the model in use (its loaded adapters with it) to `device` (infer.backends.one_copy: to the GPU
        to score, back to host memory after). The fp32 head copy is dropped, and a GPU left gives its cached
        memory back, so another process (a waking vLLM engine) can take it. Models not in use stay put."""
        device = torch.device(device)
        if device == self.device:
            return
        old, self._w32 = self.device, None
        self.model.to(device)
        self.device = device
        _release(old)

    # ----------------------------------------------------------------- generate
    @torch.inference_mode()
    def generate(self, prompts: Sequence[list[int]], spec: SamplingSpec,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        if not spec.greedy and (seeds is None or len(seeds) != len(prompts)):
            raise ValueError("sampling needs one seed per prompt")
        out: list[Completion] = []
        for i in range(0, len(prompts), self.batch_size):
            batch_seeds = None if spec.greedy else list(seeds[i:i + self.batch_size])
            out += self._generate_batch(list(prompts[i:i + self.batch_size]), spec, batch_seeds)
        return out

    def _generate_batch(self, prompts: list[list[int]], spec: SamplingSpec, seeds) -> list[Completion]:
        B, L = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for b, p in enumerate(prompts):                # left padding: the newest token sits at the right
            ids[b, L - len(p):] = torch.tensor(p)
            mask[b, L - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gens = None if spec.greedy else [torch.Generator().manual_seed(int(s)) for s in seeds]
        eos = torch.tensor(self.eos_ids, device=self.device)
        tokens: list[list[int]] = [[] for _ in range(B)]
        lps: list[list[float]] = [[] for _ in range(B)]
        done = [False] * B
        res = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        for _ in range(spec.max_new_tokens):
            logits = res.logits[:, -1, :].float()      # (B, V) fp32
            nxt, lp = self._pick(logits, spec, gens)
            for b in range(B):
                if not done[b]:
                    tokens[b].append(int(nxt[b]))
                    lps[b].append(float(lp[b]))
                    done[b] = bool(torch.isin(nxt[b], eos))
            if all(done):
                break
            nxt = torch.where(torch.tensor(done, device=self.device), torch.full_like(nxt, self.pad_id), nxt)
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=self.device)], dim=1)
            pos = pos[:, -1:] + 1
            res = self.model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                             past_key_values=res.past_key_values, use_cache=True)
        return [Completion(t, bool(t) and t[-1] in self.eos_ids, lp) for t, lp in zip(tokens, lps)]

    @staticmethod
    def _pick(logits: torch.Tensor, spec: SamplingSpec, gens) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token per row and its log-prob under the decoding distribution. logits (B, V) fp32."""
        if spec.greedy:
            logp = torch.log_softmax(logits, dim=-1)
            nxt = logits.argmax(dim=-1)                # first maximum: deterministic
            return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)
        logp = torch.log_softmax(logits / spec.temperature, dim=-1)   # (B, V)
        if spec.top_p < 1.0:
            sorted_lp, order = logp.sort(dim=-1, descending=True)
            cum = sorted_lp.exp().cumsum(-1)
            drop = (cum - sorted_lp.exp()) >= spec.top_p              # keep the smallest prefix reaching top_p
            sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
            logp = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_lp)
            logp = torch.log_softmax(logp, dim=-1)
        probs = logp.exp().cpu()
        nxt = torch.stack([torch.multinomial(probs[b], 1, generator=g)[0] for b, g in enumerate(gens)])
        nxt = nxt.to(logits.device)
        return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)

    # ----------------------------------------------------------------- score
    def _head_fp32(self, head) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The output projection in fp32 (cached): logits are computed in fp32, not in bf16.

        A bf16 model would otherwise give bf16 logits (8-bit mantissa), which shifts entropies and
        creates spurious ties; the copy costs V x H x 4 bytes (2.2 GiB at 7B).
        """
        if getattr(self, "_w32", None) is None or self._w32[0] is not head.weight:
            bias = getattr(head, "bias", None)
            self._w32 = (head.weight, head.weight.float(), None if bias is None else bias.float())
        return self._w32[1], self._w32[2]

    # ----------------------------------------------------------------- score
    @torch.inference_mode()
    def score(self, prompts: Sequence[list[int]], completions: Sequence[list[int]],
              logits_at: Sequence[Sequence[int]] | None = None) -> list[Scored]:
        if len(prompts) != len(completions):
            raise ValueError("score needs one completion per prompt")
        out: list[Scored] = []
        for i in range(0, len(prompts), self.batch_size):
            at = None if logits_at is None else logits_at[i:i + self.batch_size]
            out += self._score_batch(prompts[i:i + self.batch_size], completions[i:i + self.batch_size], at)
        return out

    def _score_batch(self, prompts, completions, logits_at) -> list[Scored]:
        seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
        B, L = len(seqs), max(len(s) for s in seqs)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for b, s in enumerate(seqs):                   # right padding: positions count from 0
            ids[b, :len(s)] = torch.tensor(s)
            mask[b, :len(s)] = 1
        hidden = self.model.get_decoder()(input_ids=ids.to(self.device),
                                          attention_mask=mask.to(self.device)).last_hidden_state  # (B, L, H)
        head = self.model.get_output_embeddings()
        weight, bias = self._head_fp32(head)
        out = []
        for b, (p, c) in enumerate(zip(prompts, completions)):
            P, T = len(p), len(c)
            h = hidden[b, P - 1:P - 1 + T]             # (T, H): index P-1+t predicts completion token t
            tgt = torch.tensor(list(c), dtype=torch.long, device=self.device)
            lp, ent = chunked_stats_from_hidden(h.float(), weight, tgt, self.chunk, bias)
            logits = None
            if logits_at is not None and len(logits_at[b]):
                sel = torch.tensor(list(logits_at[b]), dtype=torch.long, device=self.device)
                logits = torch.nn.functional.linear(h[sel].float(), weight, bias).cpu().numpy()  # (P_sel, V) fp32
            out.append(Scored(lp.cpu().numpy(), ent.cpu().numpy(), logits))
        return out


def _release(device) -> None:
    """Give a dropped model's memory back (the GPU cache too) before another is loaded."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
