"""docs/settings.md is generated from the TOML files (python -m rcea.settings_doc) and must be current."""

import re
import shutil

from rcea.config import STATUSES, _read_settings
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
# A cited source named the way the paper cites it: (Yu et al. 2025), (Wang et al. 2025a), (Kwon 2023).
CITATION = re.compile(r"\b[A-Z][A-Za-z-]+(?: et al\.| and [A-Z][A-Za-z-]+)? (?:19|20)\d\d[ab]?\b")
NUMBER_WORDS = {0: ("zero",), 1: ("one", "once"), 2: ("two", "twice"), 3: ("three",), 4: ("four",), 5: ("five",),
                6: ("six",), 7: ("seven",), 8: ("eight",), 9: ("nine",), 10: ("ten",), 12: ("twelve",)}
# S values that are words, not numbers: the word the quoted sentence uses for them.
KEYWORDS = {
    "train.lora_targets": "every attention and MLP projection", "train.precision": "bfloat16",
    "train.optimizer": "8-bit AdamW", "train.use_vllm": "vLLM", "train.beta": "no standard reference-policy KL",
    "objectives.dapo.dynamic_sampling": "dynamic removal of zero-variance groups",
    "objectives.gtpo.initial_entropy_rule": "initial completion entropy calibrated from the first on-policy batch",
}
# Values named in TRL's terms: the words a sentence stating them would use.
MEANINGS = {("loss_type", "grpo"): "sequence", ("loss_type", "dapo"): "token-level",
            ("scale_rewards", "group"): "standard deviation", ("scale_rewards", "batch"): "standard deviation",
            ("scale_rewards", "none"): "without normaliz"}


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _number_in(x: float, quote: str) -> bool:
    """`x` printed in `quote` as a number (0.28, 2,048, 10,000), a percentage of it (0.1 -> 10%, 0.99 -> 99th,
    0.30 -> 30 percentage points) or a word (eight, Four, twice), never as part of a longer number."""
    forms = {f"{x:g}", repr(x), *(f"{x:.{d}f}" for d in (1, 2, 3))}
    if float(x).is_integer():
        forms |= {str(int(x)), f"{int(x):,}"}
    edge = r"(?<![\d.,])({})(?![\d]|[.,]\d)"
    if any(re.search(edge.format(re.escape(f)), quote) for f in forms):
        return True
    pct = round(100 * x, 6)
    if 0 < x <= 1 and re.search(rf"(?<![\d.,]){re.escape(f'{pct:g}')}(?=\s*(%|–|-\d|th|percent))", quote):
        return True
    return float(x).is_integer() and any(re.search(rf"\b{w}\b", quote, re.I) for w in NUMBER_WORDS.get(int(x), ()))


def value_in_quote(key: str, value, quote: str) -> bool:
    """Whether the quoted sentence holds the setting's value (every element of a list, every value of a table)."""
    if key in KEYWORDS:
        return KEYWORDS[key].lower() in quote.lower()
    name = key.rpartition(".")[2]
    if isinstance(value, str) and (name, value) in MEANINGS:
        return MEANINGS[(name, value)] in quote.lower()
    if isinstance(value, bool):
        return value and _norm(key.rpartition(".")[2]) in _norm(quote)
    if isinstance(value, (int, float)):
        return _number_in(value, quote)
    if isinstance(value, str):
        return bool(value) and _norm(value.rpartition("/")[2]) in _norm(quote)
    if isinstance(value, list):
        return bool(value) and all(value_in_quote(key, v, quote) for v in value)
    if isinstance(value, dict):
        return bool(value) and all(value_in_quote(key, v, quote) for v in value.values())
    return False


def _all_settings() -> dict:
    settings = _read_settings(configs_dir() / "base.toml")
    settings.update(_read_settings(configs_dir() / "objectives.toml", prefix="objectives."))
    return settings


def test_every_stated_setting_quotes_the_paper_sentence_it_comes_from():
    """S means stated in this paper: the doc carries `[paper §N: "the sentence"]` (or `Table X`), a quote of at
    least three words, so a reader can find the sentence; a value the paper does not state is E, R or C."""
    missing = []
    for key, s in _all_settings().items():
        if s.status != "S":
            continue
        quotes = [q for _, q in PAPER_PLACES.findall(s.doc)]
        if not any(len(q.split()) >= 3 for q in quotes):
            missing.append(key)
    assert not missing, f"stated settings without the paper sentence they come from: {missing}"


def test_every_stated_quote_holds_its_value_and_every_cited_value_names_its_source():
    """S: the quoted sentences of the paper contain the value itself (the number, or the word for it); a value
    the paper leaves out of its text but takes from a source it cites is E, and its doc names that source as
    the paper cites it ("Yu et al. 2025")."""
    settings = _all_settings()
    bad_s = [k for k, s in settings.items() if s.status == "S"
             and not value_in_quote(k, s.value, " / ".join(q for _, q in PAPER_PLACES.findall(s.doc)))]
    assert not bad_s, f"S settings whose quoted sentence does not hold the value (tag them E, R or C): {bad_s}"
    assert "E" in STATUSES, "the tags need one for the cited source's value"
    bad_e = [k for k, s in settings.items() if s.status == "E" and not CITATION.search(s.doc)]
    assert not bad_e, f"E settings whose doc does not name the cited source: {bad_e}"


def test_the_value_check_sees_numbers_percentages_words_and_rejects_a_missing_value():
    q = "Four gradient-accumulation steps yield batches of 64 trajectories at 10% warmup and 2,048 tokens"
    assert _number_in(4, q) and _number_in(64, q) and _number_in(0.1, q) and _number_in(2048, q)
    assert not _number_in(6, q) and not _number_in(0.2, q) and not _number_in(204, q) and not _number_in(48, q)
    assert _number_in(0.28, "clipping 0.2 / 0.28 here") and not _number_in(0.2, "a clip of 0.28")
    assert value_in_quote("x.benchmark_order", ["aime24", "math500"], "| AIME'24 | MATH 500 |")
    assert not value_in_quote("objectives.dapo.epsilon", 0.2,
                              "DAPO uses token-level loss normalization, asymmetric clipping")
    assert not value_in_quote("objectives.grpo.loss_type", "grpo", "GRPO (Shao et al. 2024)")
    assert CITATION.search("the cited source's (Yu et al. 2025)") and not CITATION.search("the official code")


def test_the_cite_format_is_recognised_and_an_uncited_s_fails(tmp_path):
    good = '[paper §11: "GRPO uses symmetric clipping at 0.2"]'
    assert PAPER_PLACES.findall(good) == [("§11", "GRPO uses symmetric clipping at 0.2")]
    assert not PAPER_PLACES.findall('[paper §99: "a made up place here"]')
    assert not PAPER_PLACES.findall("stated by the paper")


# Tags the audit against the paper's text settled (issue 24): each with the reason in its doc line.
SETTLED = {
    "objectives.dapo.overlong_penalty_factor": ("R", 1.0), "objectives.clip_cov.clip_cov_ratio": ("E", 2e-4),
    "objectives.kl_cov.kl_cov_ratio": ("E", 2e-3), "objectives.grpo.adv_eps": ("C", 1e-4),
    "objectives.dapo.adv_eps": ("C", 1e-4), "objectives.ep_grpo.num_buckets": ("S", 10),
    "train.top_p": ("C", 1.0), "train.lr_scheduler": ("C", "linear"), "data.train_pool_split": ("C", "math"),
    "eval.minerva_subset_size": ("S", 40), "aggregate.steps_per_epoch": ("S", {"3B": 4000, "7B": 8000}),
    "probe.temperature": ("R", 1.0), "probe.max_new_tokens": ("R", 2048),
    # issue 30: a value the paper's text lacks but its cited source gives is E, a count derived from stated
    # numbers R, a count the paper prints S (the bucketing rule stays our reading, said in the doc)
    "objectives.dapo.epsilon": ("E", 0.2), "objectives.dapo.epsilon_high": ("E", 0.28),
    "objectives.gtpo.w_raw": ("E", 2.0), "data.max_prompt_tokens": ("R", 204), "train.per_device_batch": ("R", 16),
    "audit.n_questions": ("S", 29), "audit.per_question": ("C", 18),
    # issue 41: GTPO's ln 2 is its source's (the paper's text lost it), the initial-entropy rule is stated,
    # the uncertain label is a reading of a count
    "objectives.gtpo.ent_threshold": ("E", 0.6931471805599453), "objectives.gtpo.initial_entropy_rule": ("S", True),
    "aggregate.uncertain_labels": ("R", ["uncertain"]),
}


def test_the_settled_tags_and_the_two_dapo_readings():
    settings = _all_settings()
    for key, (status, value) in SETTLED.items():
        assert (settings[key].status, settings[key].value) == (status, value), key
    archer = [k for k in settings if k.startswith("objectives.archer.")]
    assert archer and all(settings[k].status in ("E", "R", "C") for k in archer)
    assert not any("Archer is not in the paper" in s.doc for s in settings.values())  # cited, not evaluated
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
