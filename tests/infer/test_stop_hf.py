"""Issue 29, item 2: the Transformers backend ends a completion at the run's stop set (data.stop_tokens), and so
at <|im_end|> although the tokenizer's and the generation config's EOS is <|endoftext|> (Qwen2.5 base's, and
now the tiny model's, convention). On the code before the fix the backend stopped only at the model's own EOS
set, so the scripted model's invented next turn (`<|im_start|> 7 7 ...`) ran on to the token budget."""

from __future__ import annotations

import pytest

from infer.backends import SamplingSpec, get_backend
from rcea.config import ConfigError, load_config
from rcea.data import stop_strings
from tests.common.stop_script import build_scripted_model, prompt_ids


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("scripted"))


def test_the_hf_backend_cuts_at_im_end_with_the_stop_setting(scripted):
    path, ids = scripted
    stops = stop_strings(load_config("tiny"))
    be = get_backend("hf", str(path), batch_size=2, stop_tokens=stops)
    assert be.tokenizer.eos_token == "<|endoftext|>" and set(be.eos_ids) == {ids["im_end"], ids["endoftext"]}
    p = prompt_ids(be.tokenizer)
    long, short = [ids["four"], ids["two"], ids["im_end"]], [ids["two"], ids["im_end"]]
    greedy = be.generate([p, p], SamplingSpec(max_new_tokens=12, greedy=True))
    assert [c.token_ids for c in greedy] == [long, long] and all(c.finished for c in greedy)
    sampled = be.generate([p] * 6, SamplingSpec(max_new_tokens=12, temperature=1.0), seeds=list(range(6)))
    assert {tuple(c.token_ids) for c in sampled} == {tuple(long), tuple(short)}   # rows of both lengths in a batch
    assert all(c.finished and len(c.sampler_logprobs) == len(c.token_ids) for c in sampled)


def test_without_the_stop_setting_the_invented_turn_runs_to_the_budget(scripted):
    """What every generator did before: the model's own EOS (<|endoftext|>) only."""
    path, ids = scripted
    be = get_backend("hf", str(path), batch_size=1)
    assert be.eos_ids == [ids["endoftext"]]
    (c,) = be.generate([prompt_ids(be.tokenizer)], SamplingSpec(max_new_tokens=8, greedy=True))
    assert c.token_ids == [ids["four"], ids["two"], ids["im_end"], ids["im_start"]] + [ids["seven"]] * 4
    assert not c.finished


@pytest.mark.parametrize("stops, message", [
    (["</s>"], "not a single special token"),
    (["<|im_end|>"], "leaves out the policy tokenizer's EOS '<|endoftext|>'"),
    (["<|im_end|>", "<|endoftext|>", "7"], "'7', which is not a single special token"),
])
def test_a_stop_set_the_tokenizer_cannot_honour_is_refused_naming_the_setting(scripted, stops, message):
    path, _ = scripted
    with pytest.raises(ConfigError, match="data.stop_tokens") as exc:
        get_backend("hf", str(path), stop_tokens=stops)
    assert message in str(exc.value)


@pytest.mark.parametrize("value", ["[]", "[1]", '[""]'])
def test_an_empty_or_non_string_stop_setting_is_refused_in_one_line(value):
    cfg = load_config("tiny", overrides=[f"data.stop_tokens={value}"])
    with pytest.raises(ConfigError, match=r"data.stop_tokens = .*non-empty list of special-token strings"):
        stop_strings(cfg)
