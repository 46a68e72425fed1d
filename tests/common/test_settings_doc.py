"""docs/settings.md is generated from the TOML files (python -m rcea.settings_doc) and must be current."""

import re
import shutil

from rcea.config import _read_settings
from rcea.paths import configs_dir, project_root
from rcea.settings_doc import main, render


def test_the_committed_settings_document_is_current():
    assert main(["--check"]) == 0, "run: python -m rcea.settings_doc"


def test_every_setting_appears_once_with_its_status_and_reason():
    text = (project_root() / "docs" / "settings.md").read_text(encoding="utf-8")
    settings = _read_settings(configs_dir() / "base.toml")
    settings.update(_read_settings(configs_dir() / "objectives.toml", prefix="objectives."))
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert len(rows) == len(settings)
    for key, s in settings.items():
        assert s.doc.strip(), f"{key} has no doc text: say what it is and why it has this value"
        assert f"`{key.rpartition('.')[0]}`" in text
        assert any(r.startswith(f"| `{key.rpartition('.')[2]}` |") and f"| {s.status} |" in r for r in rows), key


def test_a_changed_doc_or_scale_value_changes_the_document(tmp_path):
    cdir = tmp_path / "configs"
    shutil.copytree(configs_dir(), cdir)
    base = (cdir / "base.toml").read_text()
    (cdir / "base.toml").write_text(re.sub(r'(?m)^(lora_rank = .*doc = ")', r"\1a | pipe, ", base))
    (cdir / "scales" / "7b.toml").write_text((cdir / "scales" / "7b.toml").read_text() + "\n[probe]\nk = 16\n")
    text = render(cdir)
    assert text != render(configs_dir())
    assert "a \\| pipe, " in text  # a pipe inside a cell is escaped
    row = next(ln for ln in text.splitlines() if ln.startswith("| `k` |"))
    assert row.split("|")[2:5] == [" `32` ", " `8` ", " `16` "]  # 3B value, then each scale's change


# Where a stated (S) value may be quoted from: the paper's sections and tables as numbered in its text.
PAPER_PLACES = re.compile(r"\[paper (§(?:[1-9]|1[0-4])|Table (?:[12]|A[1-9])): \"([^\"]+)\"[^\]]*\]")


def _all_settings() -> dict:
    settings = _read_settings(configs_dir() / "base.toml")
    settings.update(_read_settings(configs_dir() / "objectives.toml", prefix="objectives."))
    return settings


def test_every_stated_setting_quotes_the_paper_sentence_it_comes_from():
    """S means stated: the doc carries `[paper §N: "the sentence"]` (or `Table X`), a quote of at least three
    words, so a reader can find the sentence; a value the paper does not state is R or C."""
    missing = []
    for key, s in _all_settings().items():
        if s.status != "S":
            continue
        quotes = [q for _, q in PAPER_PLACES.findall(s.doc)]
        if not any(len(q.split()) >= 3 for q in quotes):
            missing.append(key)
    assert not missing, f"stated settings without the paper sentence they come from: {missing}"


def test_the_cite_format_is_recognised_and_an_uncited_s_fails(tmp_path):
    good = '[paper §11: "GRPO uses symmetric clipping at 0.2"]'
    assert PAPER_PLACES.findall(good) == [("§11", "GRPO uses symmetric clipping at 0.2")]
    assert not PAPER_PLACES.findall('[paper §99: "a made up place here"]')
    assert not PAPER_PLACES.findall("stated by the paper")


# Tags the audit against the paper's text settled (issue 24): each with the reason in its doc line.
SETTLED = {
    "objectives.dapo.overlong_penalty_factor": ("R", 1.0), "objectives.clip_cov.clip_cov_ratio": ("R", 2e-4),
    "objectives.kl_cov.kl_cov_ratio": ("R", 2e-3), "objectives.grpo.adv_eps": ("C", 1e-4),
    "objectives.dapo.adv_eps": ("C", 1e-4), "objectives.ep_grpo.num_buckets": ("R", 10),
    "train.top_p": ("C", 1.0), "train.lr_scheduler": ("C", "linear"), "data.train_pool_split": ("C", "math"),
    "eval.minerva_subset_size": ("S", 40), "aggregate.steps_per_epoch": ("S", {"3B": 4000, "7B": 8000}),
    "probe.temperature": ("R", 1.0), "probe.max_new_tokens": ("R", 2048),
}


def test_the_settled_tags_and_the_two_dapo_readings():
    settings = _all_settings()
    for key, (status, value) in SETTLED.items():
        assert (settings[key].status, settings[key].value) == (status, value), key
    archer = [k for k in settings if k.startswith("objectives.archer.")]
    assert archer and all(settings[k].status in ("R", "C") for k in archer)
    doc = settings["objectives.dapo.overlong_penalty_factor"].doc
    assert "get_soft_overlong_punishment" in doc and "0.5" in doc and "overlong_penalty_factor=0.5" in doc
    assert "lost" in settings["objectives.clip_cov.clip_cov_ratio"].doc and "does not restate" not in \
        settings["objectives.clip_cov.clip_cov_ratio"].doc
    assert "not stated" not in settings["train.top_p"].doc


def test_the_verl_reading_of_the_dapo_factor_is_one_override_away():
    from rcea.config import load_config

    cfg = load_config("tiny", "dapo", ["objectives.dapo.overlong_penalty_factor=0.5"])
    assert cfg.objective()["overlong_penalty_factor"] == 0.5
    assert load_config("tiny", "dapo").objective()["overlong_penalty_factor"] == 1.0


def test_every_setting_is_read_by_the_code():
    """A setting nothing reads changes nothing but the configuration hash (so it only orphans finished runs):
    each one's name must appear in the code of the roles or the shared core. (A name read through a whole
    section or a loop still appears as a word: `cfg[f"toy.{k}"] for k in ("seed", ...)`.)"""
    root = project_root()
    code = "\n".join(p.read_text(encoding="utf-8") for top in ("rcea", "orchestrate", "train", "infer", "aggregate")
                     for p in (root / top).rglob("*.py"))
    settings = _read_settings(configs_dir() / "base.toml")
    settings.update(_read_settings(configs_dir() / "objectives.toml", prefix="objectives."))
    def read(key: str) -> bool:
        name = key.rpartition(".")[2]
        if re.search(rf"\b{re.escape(name)}\b", code):
            return True
        head, _, tail = name.partition("_")   # cfg[f"model.tiny_{k}"] for k in ("layers", ...)
        return bool(tail) and f"{head}_{{" in code and f'"{tail}"' in code

    unread = sorted(k for k in settings if not read(k))
    assert unread == [], f"settings no code reads (make them take effect or remove them): {unread}"
