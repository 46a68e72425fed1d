import json

import pytest

from rcea.config import METHODS, SCALES, ConfigError, load_config, parse_override


def test_every_setting_is_tagged_and_scales_load():
    for scale in SCALES:
        cfg = load_config(scale)
        assert cfg.keys(), scale
        for key in cfg.keys():
            assert cfg.status(key) in ("S", "E", "R", "C"), key


def test_paper_values_survive_on_real_scales():
    cfg3, cfg7 = load_config("3b"), load_config("7b")
    assert cfg3["train.lora_rank"] == 32 and cfg3["train.lora_alpha"] == 64
    assert cfg3["data.max_prompt_tokens"] == 204 and cfg3["data.draw_size"] == 8000
    assert cfg3["train.per_device_batch"] * cfg3["train.grad_accum"] == 64
    assert cfg7["train.per_device_batch"] * cfg7["train.grad_accum"] == 32
    assert cfg3.status("train.learning_rate") == "C" and cfg3.status("train.lora_rank") == "S"
    assert sum(cfg3["probe.composition"].values()) == cfg3["probe.n_questions"] == 200


@pytest.mark.parametrize("scale,method,overrides,needle", [
    ("huge", None, (), "valid scales: tiny, 3b, 7b"),
    ("tiny", "ppo", (), "valid methods: " + ", ".join(METHODS)),
    ("tiny", None, ("train.lr=1",), "valid keys in [train]"),
    ("tiny", None, ("nosection.x=1",), "valid sections"),
    ("tiny", None, ("train.max_steps=abc",), "must be int"),
    ("tiny", None, ("train.use_vllm=1",), "must be bool"),
    ("tiny", None, ("train.max_steps",), "section.key=value"),
    ("tiny", None, ("train.max_steps=-2",), "train.max_steps must be -1"),
    ("tiny", None, ("train.learning_rate=-1",), "override 'train.learning_rate=-1': train.learning_rate must be > 0"),
    ("tiny", None, ("train.save_steps=0",), "train.save_steps must be >= 1, got 0"),
    ("tiny", None, ("train.num_generations=1",), "train.num_generations must be >= 2"),
    ("tiny", None, ("train.top_p=1.5",), "train.top_p must be in (0, 1], got 1.5"),
    ("tiny", None, ("train.lora_dropout=1",), "train.lora_dropout must be in [0, 1)"),
    ("tiny", None, ("eval.milestones=[0.5, 2.0]",), "eval.milestones must be in (0, 1] (each value)"),
    ("tiny", None, ("probe.composition={ toy = -1 }",), "probe.composition must be >= 0 (each value)"),
    ("tiny", None, ("objectives.kl_cov.kl_cov_ratio=2",), "objectives.kl_cov.kl_cov_ratio must be in [0, 1]"),
    ("tiny", None, ("aggregate.bootstrap_resamples=-5",), "aggregate.bootstrap_resamples must be >= 1"),
    ("tiny", None, ("probe.seed=-3",), "probe.seed must be >= 0"),
    ("tiny", None, ("train.max_steps=0",), "train.max_steps must be -1"),
])
def test_bad_configuration_names_the_valid_choices(scale, method, overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(scale, method, overrides)
    assert needle in str(err.value)


def test_max_steps_accepts_minus_one_and_positive_counts():
    assert load_config("tiny", None, ["train.max_steps=-1"])["train.max_steps"] == -1
    assert load_config("tiny", None, ["train.max_steps=1"])["train.max_steps"] == 1
    with pytest.raises(ConfigError, match=r"train.max_steps must be -1 or >= 1, got -5"):
        load_config("tiny", None, ["train.max_steps=-5"])


def test_range_edges_are_accepted():
    """The bounds themselves, where a rule includes them (and every shipped value, loaded above)."""
    cfg = load_config("tiny", None, ["train.top_p=1", "train.lora_dropout=0", "train.warmup_ratio=1",
                                     "train.num_generations=2", "train.save_steps=1", "judge.max_retries=0"])
    assert cfg["train.top_p"] == 1.0 and cfg["train.num_generations"] == 2


def test_toml_syntax_error_names_the_file_and_line(tmp_path):
    from rcea.paths import configs_dir
    (tmp_path / "scales").mkdir()
    (tmp_path / "base.toml").write_text((configs_dir() / "base.toml").read_text())
    (tmp_path / "scales" / "tiny.toml").write_text("[train]\nlearning_rate = 1e-5\nsave_steps = \n")
    with pytest.raises(ConfigError, match=r"tiny.toml: not valid TOML: .*line 3.*fix that line") as err:
        load_config("tiny", root=tmp_path)
    assert "\n" not in str(err.value)
    (tmp_path / "base.toml").write_text("[train\n")
    with pytest.raises(ConfigError, match=r"base.toml: not valid TOML: .*line 1"):
        load_config("tiny", root=tmp_path)


def test_overrides_are_typed_and_keep_status():
    cfg = load_config("tiny", "grpo", ["train.learning_rate=3", "eval.benchmarks=['amc23']"])
    assert cfg["train.learning_rate"] == 3.0 and isinstance(cfg["train.learning_rate"], float)
    assert cfg["eval.benchmarks"] == ["amc23"]
    assert parse_override("a.b = word") == ("a.b", "word")


def test_scale_file_with_unknown_key_is_refused(tmp_path):
    (tmp_path / "scales").mkdir()
    from rcea.paths import configs_dir
    (tmp_path / "base.toml").write_text((configs_dir() / "base.toml").read_text())
    (tmp_path / "scales" / "tiny.toml").write_text("[train]\nlearnin_rate = 1.0\n")
    with pytest.raises(ConfigError, match="tiny.toml.*valid keys in \\[train\\]"):
        load_config("tiny", root=tmp_path)


def test_write_copies_verbatim_and_refuses_a_different_config(tmp_path):
    cfg = load_config("tiny", "grpo")
    cfg.write(tmp_path)
    from rcea.paths import configs_dir
    assert (tmp_path / "config" / "base.toml").read_text() == (configs_dir() / "base.toml").read_text()
    resolved = json.loads((tmp_path / "config" / "resolved.json").read_text())
    assert resolved["hash"] == cfg.hash() and resolved["settings"]["train.seed"]["status"] == "S"
    cfg.write(tmp_path)  # same configuration: fine
    other = load_config("tiny", "grpo", ["train.seed=7"])
    assert other.hash() != cfg.hash()
    with pytest.raises(ConfigError, match="different configuration"):
        other.write(tmp_path)


def test_endpoint_settings_do_not_change_the_run_identity(tmp_path):
    """A study rerun against a judge on another port must reuse the finished training runs."""
    from rcea.config import NOT_IN_HASH

    cfg = load_config("tiny", "grpo")
    assert NOT_IN_HASH <= set(cfg.to_dict()["settings"]), "NOT_IN_HASH names a setting that does not exist"
    cfg.write(tmp_path)
    moved = load_config("tiny", "grpo", ['judge.base_url="http://127.0.0.1:9/v1"', "codebook.concurrency=2"])
    assert moved.hash() == cfg.hash()
    moved.write(tmp_path)  # accepted: same run
    assert load_config("tiny", "grpo", ["judge.temperature=0.5"]).hash() != cfg.hash()


def test_a_status_tag_is_not_part_of_the_run_identity():
    """Retagging a setting (R -> S once a quote is found) must not orphan finished runs; a value change must."""
    import dataclasses

    cfg = load_config("tiny", "grpo")
    retagged = load_config("tiny", "grpo")
    key = "train.learning_rate"
    old = retagged._s[key]
    retagged._s[key] = dataclasses.replace(old, status="C" if old.status != "C" else "R")
    assert retagged.to_dict()["settings"][key]["status"] != cfg.to_dict()["settings"][key]["status"]
    assert retagged.hash() == cfg.hash() and retagged.hash("train") == cfg.hash("train")
    retagged._s[key] = dataclasses.replace(old, value=old.value * 2)
    assert retagged.hash("train") != cfg.hash("train")


def test_environment_overrides_apply_before_command_line(monkeypatch):
    monkeypatch.setenv("RCEA_OVERRIDES", "train.max_steps=7; train.seed=3")
    cfg = load_config("tiny", "grpo", ["train.seed=5"])
    assert cfg["train.max_steps"] == 7 and cfg["train.seed"] == 5
    monkeypatch.setenv("RCEA_OVERRIDES", "train.nope=1")
    with pytest.raises(ConfigError, match="valid keys in \\[train\\]"):
        load_config("tiny")


def test_the_training_hash_holds_only_what_training_reads(tmp_path):
    """Correcting the judge or codebook model (or who labels) after training must not orphan a trained run:
    a run folder's configuration is compared on the training settings only; a training setting still counts."""
    cfg = load_config("tiny", "grpo")
    cfg.write(tmp_path, "train")
    judged = load_config("tiny", "grpo", ['judge.model="other/judge"', 'judge.labeller="llm"',
                                          'codebook.model="other/codebook"', "probe.k=3", "objectives.dapo.epsilon_high=0.3"])
    assert judged.hash("train") == cfg.hash("train") and judged.hash() != cfg.hash()
    judged.write(tmp_path, "train")                               # the same training run: accepted
    for change in ("train.learning_rate=0.5", "data.draw_size=7", "objectives.grpo.epsilon=0.3", "model.tiny_seed=3"):
        other = load_config("tiny", "grpo", [change])
        assert other.hash("train") != cfg.hash("train"), change
        with pytest.raises(ConfigError, match="different configuration"):
            other.write(tmp_path, "train")


def test_a_run_folder_written_before_the_training_scope_is_still_accepted(tmp_path):
    """resolved.json from before the scope (its hash over every setting) holds the same training settings."""
    cfg = load_config("tiny", "grpo")
    cfg.write(tmp_path)                                           # the old way: every setting
    assert json.loads((tmp_path / "config" / "resolved.json").read_text())["hash"] == cfg.hash()
    cfg.write(tmp_path, "train")
    assert json.loads((tmp_path / "config" / "resolved.json").read_text())["hash"] == cfg.hash("train")


def test_each_scale_file_says_where_its_units_run_as_values(tmp_path):
    """configs/scales/*.toml [launch] (rcea.launch): what differs between tiny and 3b/7b besides settings is a
    value read once per scale, checked on load with one line naming the fix, and never a setting (no hash)."""
    import shutil

    from rcea.launch import launch
    from rcea.paths import configs_dir

    tiny, b3 = launch("tiny"), launch("3b")
    assert (tiny.launcher, tiny.device, tiny.slots, tiny.workers, tiny.train_gpus) == (
        "local", "cpu", {"train": 2, "infer": 1}, 2, ())
    assert (b3.launcher, b3.device, b3.train_gpus, b3.judge_server, b3.train_slots()) == ("compose", "gpu", (), True, 1)
    assert not tiny.judge_server and launch("7b").launcher == "compose"
    with pytest.raises(ConfigError, match="unknown setting 'launch.launcher'"):
        load_config("3b", None, ['launch.launcher="local"'])   # where units run is not a setting to override
    root = tmp_path / "configs"
    shutil.copytree(configs_dir(), root)
    scale_file = root / "scales" / "3b.toml"
    text = scale_file.read_text()
    scale_file.write_text(text.replace("train_gpus = []", "train_gpus = [0, 1, 2]"))
    assert launch("3b", root).train_slots() == 3                       # one training run per GPU, side by side
    assert launch("3b", root).placement(7, 8, 8).train == (0, 1, 2)   # the override, not the rule
    assert load_config("3b", "grpo", root=root).hash("train") == load_config("3b", "grpo").hash("train")
    for i, (bad, message) in enumerate((
            (text.replace('launcher = "compose"', 'launcher = "ssh"'), "unknown launcher"),
            (text.replace("workers = 8 ", "workers = 9 "), "workers must be 1..8"),
            (text.replace("train_gpus = []", "train_gpus = [0, 0]"), "distinct host GPU indices"),
            (text.replace("slots = { train = 1, infer = 8 }", "slots = { train = 1 }"), "slots must be"),
            (text.replace("judge_server = true", "judge_sever = true"), "missing judge_server"))):
        assert bad != text, message
        other = tmp_path / f"bad{i}"   # a folder each: a scale's record is read once per folder
        (other / "scales").mkdir(parents=True)
        (other / "scales" / "3b.toml").write_text(bad)
        with pytest.raises(ConfigError, match=message):
            launch("3b", other)
