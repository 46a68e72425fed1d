"""Lists derived from their files (issue 39): the methods and their labels are configs/objectives.toml's sections,
and the quick demo's values are the overlay configs/overlays/quick.toml, not Python constants."""

import shutil
import tomllib

import pytest

from rcea.config import METHOD_LABELS, METHODS, ConfigError, _method_labels, load_config, overlay
from rcea.paths import configs_dir


def test_the_methods_are_the_objective_sections_in_order_with_their_labels():
    with (configs_dir() / "objectives.toml").open("rb") as fh:
        sections = tomllib.load(fh)
    assert METHODS == tuple(sections) == ("grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo", "gtpo", "archer")
    assert METHOD_LABELS == {"grpo": "GRPO", "dapo": "DAPO", "clip_cov": "Clip-Cov", "kl_cov": "KL-Cov",
                             "ep_grpo": "EP-GRPO", "gtpo": "GTPO", "archer": "Archer"}
    cfg = load_config("tiny", "clip_cov")
    assert not [k for k in cfg.keys() if k.endswith(".label")]      # a label is a name, not a setting:
    assert "label" not in cfg.objective()                            # in no record and no configuration hash


def test_a_section_without_a_label_names_the_fix(tmp_path):
    shutil.copytree(configs_dir(), tmp_path / "configs")
    path = tmp_path / "configs" / "objectives.toml"
    path.write_text(path.read_text().replace('label = "KL-Cov"\n', ""))
    with pytest.raises(ConfigError, match=r"\[kl_cov\] has no label; add label = "):
        _method_labels(tmp_path / "configs")
    path.write_text((configs_dir() / "objectives.toml").read_text() + '\n[base]\nlabel = "B"\n')
    with pytest.raises(ConfigError, match="names the untrained policy"):
        _method_labels(tmp_path / "configs")


def test_the_quick_overlay_is_the_demos_overrides_in_file_order(tmp_path):
    # the strings every process of `invoke demo --quick` receives through RCEA_OVERRIDES (as they were typed)
    assert overlay("quick") == ("train.max_steps=4", "train.save_steps=2", "train.per_device_batch=16",
                                "probe.composition={ toy = 12 }", "probe.n_questions=12", "probe.k=4",
                                "eval.questions_per_benchmark=12", "passk.questions=6", "passk.n=4",
                                "aggregate.bootstrap_resamples=200")
    cfg = load_config("tiny", "grpo", overlay("quick"))
    assert cfg["probe.composition"] == {"toy": 12} and cfg["train.max_steps"] == 4
    with pytest.raises(ConfigError, match="no overlay 'slow'; overlays .*: quick"):
        overlay("slow")
    shutil.copytree(configs_dir(), tmp_path / "configs")
    (tmp_path / "configs" / "overlays" / "bad.toml").write_text("[train]\nmax_step = 3\n")
    with pytest.raises(ConfigError, match=r"bad.toml: unknown setting 'train.max_step'; valid keys in \[train\]"):
        overlay("bad", tmp_path / "configs")
