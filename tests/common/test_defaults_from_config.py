"""Library defaults are the values of configs/base.toml, read from there (a TOML edit moves them)."""

import tomllib

from infer.codebook import CodebookSettings
from infer.llm import LLMSettings
from rcea.paths import configs_dir


def _base() -> dict:
    with (configs_dir() / "base.toml").open("rb") as fh:
        return tomllib.load(fh)


def test_llm_and_codebook_defaults_are_the_base_toml_values():
    base = _base()
    llm, cb = LLMSettings(), CodebookSettings()
    for key in ("model", "base_url", "api_key_env", "temperature", "seed", "concurrency", "timeout_s",
                "max_retries", "max_retry_after_s"):
        assert getattr(llm, key) == base["judge"][key]["value"], key
    for key in ("induce_seed", "merge_seed", "assign_seed", "assign_passes", "chunk_size", "min_confidence"):
        assert getattr(cb, key) == base["codebook"][key]["value"], key


def test_a_toml_edit_moves_the_default(tmp_path, monkeypatch):
    import shutil

    import rcea.config

    cdir = tmp_path / "configs"
    shutil.copytree(configs_dir(), cdir)
    text = (cdir / "base.toml").read_text().replace("max_retries = { value = 5,", "max_retries = { value = 7,")
    (cdir / "base.toml").write_text(text)
    monkeypatch.setattr(rcea.config, "configs_dir", lambda: cdir)
    assert LLMSettings().max_retries == 7
