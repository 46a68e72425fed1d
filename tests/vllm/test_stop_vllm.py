"""Issue 29, item 2, on the real vLLM 0.23.0 engine (CPU): the project's vLLM backend ends a completion at the
run's stop set (data.stop_tokens, handed to vLLM as `stop_token_ids`), so at <|im_end|>, the end of the
assistant turn the demo's tiny policy was warm-started to write, although the tokenizer's and the generation
config's EOS is <|endoftext|> (Qwen2.5 base's convention, which the tiny model follows). Before the fix the
backend asked vLLM to stop at the model's EOS only: the same engine then writes on past <|im_end|>."""

from __future__ import annotations

from infer.backends.base import SamplingSpec
from infer.backends.vllm_args import sampling_kwargs
from tests.vllm.conftest import prompts


def test_the_vllm_backend_cuts_at_im_end_and_the_engine_alone_does_not(engine):
    from vllm import SamplingParams

    tok = engine.tokenizer
    im_end, eot = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    assert tok.eos_token_id == eot and engine.eos_ids == sorted([im_end, eot])
    ids = prompts(tok)
    engine.set_adapter(None)
    spec = SamplingSpec(max_new_tokens=48, greedy=True)
    assert sampling_kwargs(True, 48, engine.eos_ids)["stop_token_ids"] == engine.eos_ids
    cut = engine.generate(ids, spec)
    # the warm-started policy closes its turn: every greedy answer ends at <|im_end|>, its only stop token
    assert all(c.finished and c.token_ids[-1] == im_end for c in cut), [c.token_ids for c in cut]
    assert all(im_end not in c.token_ids[:-1] and eot not in c.token_ids for c in cut)
    # the same requests with vLLM's own stopping only (the model's EOS, <|endoftext|>): past <|im_end|>
    raw = engine.llm.generate([{"prompt_token_ids": p} for p in ids],
                              SamplingParams(temperature=0.0, max_tokens=48), use_tqdm=False)
    for c, r in zip(cut, raw):
        more = list(r.outputs[0].token_ids)
        assert more[:len(c.token_ids)] == c.token_ids and len(more) > len(c.token_ids)
