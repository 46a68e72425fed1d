"""Data loading through the `datasets` library: benchmarks, the training pool, the frozen id lists.

The benchmarks and the offline training sample are files of the project, under `mathdata/` (sources,
licences and hashes in mathdata/PROVENANCE.md); real scales read the hub pool named in the configuration. Every record needs a non-empty `problem` and `answer`: a record without one stops
the load with the file, line and id.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from rcea.jsonl import JsonlError, read_jsonl
from rcea.paths import mathdata_dir

TURN_END = "<|im_end|>"  # ChatML: every turn of the prompt template ends with this token (Qwen2.5 base's EOS is another)

BENCHMARKS = ("amc23", "aime24", "aime25", "math500", "minerva_math", "toy", "toy_wide")  # rcea/toy.py: held-out set, wide slice
# Records per shipped benchmark file (mathdata/PROVENANCE.md); `invoke doctor` checks the files against them.
BENCHMARK_COUNTS = {"math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "minerva_math": 272}
FROZEN = Path(__file__).resolve().parent / "frozen"


DataError = JsonlError  # a malformed, empty or missing data file; the message names file, line and id


def _read_records(path: Path) -> list[dict]:
    """The checked records of a shipped JSON Lines file (each with a non-empty `problem` and `answer`)."""
    if not path.exists():
        raise DataError(f"missing data file {path}; the project ships it under mathdata/ "
                        "(restore it with `git checkout -- mathdata`)")
    return read_jsonl(path, required=("problem", "answer"), nonempty_strings=True)


def _check_jsonl(path: Path) -> int:
    """Validate every line of a JSON Lines file; returns the record count."""
    return len(_read_records(path))


def _load_json_files(paths: list[Path]) -> list[dict]:
    """id / problem / answer of every record of `paths`, in order (files differ in their other fields)."""
    return [{k: r[k] for k in ("id", "problem", "answer") if k in r} for p in paths for r in _read_records(p)]


def benchmark_counts() -> dict[str, int | str]:
    """Per shipped benchmark: its validated record count, or the error that stops its load (no `datasets`)."""
    out: dict[str, int | str] = {}
    for name in BENCHMARK_COUNTS:
        try:
            out[name] = _check_jsonl(benchmark_path(name))
        except (DataError, OSError, UnicodeDecodeError) as exc:
            out[name] = str(exc)
    return out


def benchmark_path(name: str) -> Path:
    if name not in BENCHMARKS:
        raise DataError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")
    return mathdata_dir() / "benchmarks" / f"{name}.jsonl"


@lru_cache(maxsize=None)
def _benchmark_rows(name: str) -> tuple[dict, ...]:
    if name == "toy":
        from rcea import toy
        return tuple(toy.questions("test", toy.HELDOUT))
    if name == "toy_wide":
        from rcea import toy
        return tuple(toy.wide_questions(toy.HELDOUT // 2))
    ds = _load_json_files([benchmark_path(name)])
    return tuple({"id": r["id"], "problem": r["problem"], "answer": r["answer"], "benchmark": name} for r in ds)


def load_benchmark(name: str, ids: list[str] | None = None) -> list[dict[str, Any]]:
    """All records of a benchmark (or those with `ids`, in that order)."""
    rows = _benchmark_rows(name)
    if ids is None:
        return [dict(r) for r in rows]
    by_id = {r["id"]: r for r in rows}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise DataError(f"{benchmark_path(name)}: ids not found: {missing[:5]}")
    return [dict(by_id[i]) for i in ids]


def minerva_subset_ids(size: int | None = None) -> list[str]:
    """The Minerva subset: the paper evaluates 40 questions without naming them; they were drawn once (seed
    2027) and frozen in rcea/frozen/minerva40.json, which is what every run reads. `size`
    (eval.minerva_subset_size) must be that file's size: a different one would need a new draw."""
    ids = json.loads((FROZEN / "minerva40.json").read_text())["ids"]
    if size is not None and size != len(ids):
        raise DataError(f"eval.minerva_subset_size = {size}, but the frozen Minerva subset (rcea/frozen/minerva40.json) "
                        f"holds {len(ids)} questions; keep {len(ids)} (the paper's) or freeze a new draw of that size")
    return ids


def benchmark_questions(name: str, cap: int = 0) -> list[dict[str, Any]]:
    """Evaluation questions of one benchmark: Minerva is its frozen 40-question subset; `cap` > 0 keeps a prefix."""
    rows = load_benchmark(name, minerva_subset_ids() if name == "minerva_math" else None)
    return rows[:cap] if cap else rows


def probe_questions(cfg) -> list[dict[str, Any]]:
    """The fixed probe: per benchmark, a prefix (in draw order) of the frozen 200-question list.

    In the toy world the probe is a prefix of the held-out toy questions.
    """
    frozen = json.loads((FROZEN / "probe200.json").read_text())["ids"]
    frozen["toy"] = [q["id"] for q in _benchmark_rows("toy")]
    out: list[dict[str, Any]] = []
    for name, n in cfg["probe.composition"].items():
        if name not in frozen:
            raise DataError(f"probe.composition names {name!r}; valid: {', '.join(frozen)}")
        if n > len(frozen[name]):
            raise DataError(f"probe.composition asks {n} {name} questions; the frozen probe has {len(frozen[name])}")
        out += load_benchmark(name, frozen[name][:n])
    return out


def stop_strings(cfg) -> list[str]:
    """The stop set (`data.stop_tokens`): every generator (TRL's sampler, the vLLM and HF backends) ends a
    completion at the first of these tokens, keeping it. Order kept, duplicates dropped."""
    from rcea.config import ConfigError

    stops = cfg["data.stop_tokens"]
    if not isinstance(stops, list) or not stops or not all(isinstance(s, str) and s for s in stops):
        raise ConfigError(f"data.stop_tokens = {stops!r}: give a non-empty list of special-token strings, "
                          'e.g. ["<|im_end|>", "<|endoftext|>"]')
    return list(dict.fromkeys(stops))


def stop_token_ids(tokenizer, cfg) -> list[int]:
    """The token ids of `data.stop_tokens` in `tokenizer`, in the setting's order (`stop_ids_of`)."""
    return stop_ids_of(tokenizer, stop_strings(cfg))


def stop_ids_of(tokenizer, stops: list[str]) -> list[int]:
    """The ids of the stop strings `stops` (the value of `data.stop_tokens`) in `tokenizer`. Each must be one
    special token of the tokenizer (a generator stops on token ids, not on text), and the set must hold the
    tokenizer's own EOS (vLLM always stops there); anything else stops the run with a line naming the setting."""
    from rcea.config import ConfigError

    special = {t.content: i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    ids = []
    for s in stops:
        tid = special.get(s)
        if tid is None or tokenizer.encode(s, add_special_tokens=False) != [tid]:
            raise ConfigError(f"data.stop_tokens names {s!r}, which is not a single special token of the policy "
                              f"tokenizer; its special tokens are {', '.join(sorted(special))} "
                              "(set data.stop_tokens to some of them)")
        ids.append(tid)
    eos = tokenizer.eos_token
    if eos is not None and eos not in stops:
        raise ConfigError(f"data.stop_tokens = {list(stops)!r} leaves out the policy tokenizer's EOS {eos!r}, where "
                          f"vLLM stops whatever the setting says; add {eos!r} to data.stop_tokens")
    return ids


def chat_messages(problem: str, cfg) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{problem}\n{cfg['data.instruction']}"}]


def _reference_answer(record: dict) -> str | None:
    """The reference answer of a pool record: `answer`, or Skywork's `reward_model.ground_truth`."""
    ans = record.get("answer")
    if ans is None and isinstance(record.get("reward_model"), dict):
        ans = record["reward_model"].get("ground_truth")
    if isinstance(ans, list):
        ans = ans[0] if ans else None
    return str(ans).strip() if ans is not None and str(ans).strip() else None


def _problem_text(record: dict) -> str | None:
    prob = record.get("problem")
    if prob is None and isinstance(record.get("prompt"), list) and record["prompt"]:
        prob = record["prompt"][-1].get("content")
    return prob if isinstance(prob, str) and prob.strip() else None


def load_train_records(cfg, tokenizer=None) -> list[dict[str, Any]]:
    """The training pool, filtered and drawn as the `data.*` settings say (docs/settings.md).

    Filter: drop records without an extractable reference answer, and (given the policy tokenizer)
    prompts longer than `data.max_prompt_tokens` after the chat template. Draw: `data.draw_size`
    examples with `data.dataset_seed`.
    """
    if cfg["data.world"] == "toy":
        from rcea import toy
        return toy.questions("train", cfg["data.draw_size"], seed=cfg["toy.seed"])
    if cfg["data.use_offline"]:
        files = [mathdata_dir() / f for f in cfg["data.offline_train_files"]]
        ds = _load_json_files(files)
    else:
        from rcea.hub import load_train_pool
        ds = load_train_pool(cfg["data.train_pool"], cfg["data.train_pool_split"], cfg["data.train_pool_revision"])
    records = []
    for r in ds:
        problem, answer = _problem_text(r), _reference_answer(r)
        if problem is None or answer is None:
            continue
        records.append({"id": str(r.get("id", len(records))), "problem": problem, "answer": answer})
    if tokenizer is not None:
        limit = cfg["data.max_prompt_tokens"]
        records = [r for r in records if prompt_length(r["problem"], cfg, tokenizer) <= limit]
    import datasets
    drawn = datasets.Dataset.from_list(records).shuffle(seed=cfg["data.dataset_seed"])
    n = min(cfg["data.draw_size"], len(drawn))
    return [dict(x) for x in drawn.select(range(n))]


def prompt_length(problem: str, cfg, tokenizer) -> int:
    ids = tokenizer.apply_chat_template(chat_messages(problem, cfg), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return len(ids)
