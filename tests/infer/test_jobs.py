"""Every job kind on the tiny model, end to end through the queue: schema, bounds, consistency, determinism,
an independent recomputation of a covariance row, failure reasons, and kill -9 of a worker subprocess."""

import math
import os
import shutil
import signal
import re
import subprocess
import sys
import time
import zlib

import numpy as np
import pandas as pd
import pytest
import torch

from rcea.layout import state_path
from rcea.config import load_config
from rcea.schema import TABLES
from rcea.store import read_table

from infer.__main__ import main as cli
from infer.jobs import covariance_questions, derive_seed, encode, run_greedy, run_job
from infer.queue import Queue
from infer.worker import Context, run_worker
from tests.infer.tiny_run import subprocess_env, tiny_overrides

SORT = {"samples": ["step", "question_id", "sample"], "tokens": ["step", "question_id", "sample", "position"],
        "greedy": ["step", "benchmark", "question_id"], "passk": ["step", "question_id"], "covariance": ["step_to"]}
DTYPES = {"str": "string", "int": "integer", "float": "floating", "bool": "boolean"}


def _enqueue(what: str) -> None:
    args = ["enqueue", "--scale", "tiny", "--method", "grpo", "--what", what]
    for o in tiny_overrides():
        args += ["--override", o]
    assert cli(args) == 0


def _table(root, name):
    df = read_table(root / "infer" / "tiny" / "tables" / name)
    return df.sort_values(SORT[name]).reset_index(drop=True)


class _Quiet:
    def __init__(self):
        import io
        self.stream, self.t0 = io.StringIO(), 0.0

    def start(self, job):
        self.t0 = time.time()

    def __call__(self, *a):
        pass


@pytest.fixture(scope="module")
def ran(tiny_data_template, tmp_path_factory):
    """All jobs of the fake grpo run, one uninterrupted in-process CPU worker."""
    root = tmp_path_factory.mktemp("ran") / "data"
    shutil.copytree(tiny_data_template, root)
    old = os.environ.get("RCEA_DATA")
    os.environ["RCEA_DATA"] = str(root)
    try:
        _enqueue("all")
        q = Queue(state_path("tiny"))
        stats = run_worker(q, run_job, Context("cpu", "hf"), until_empty=True, poll_s=0.1, display=_Quiet())
        yield root, stats, q
    finally:
        os.environ.pop("RCEA_DATA") if old is None else os.environ.__setitem__("RCEA_DATA", old)


def test_every_job_runs_and_tables_conform(ran):
    root, stats, q = ran
    assert stats == {"done": 10, "failed": 0}, q.jobs()
    for name, cols in TABLES.items():
        df = _table(root, name)
        assert len(df) > 0
        for col, kind in cols.items():
            inferred = pd.api.types.infer_dtype(df[col], skipna=True)
            if df[col].isna().all():
                assert kind.endswith("?"), f"{name}.{col} is all null"
            else:
                assert DTYPES[kind.rstrip("?")] in inferred, f"{name}.{col}: {inferred} for {kind}"
    samples = _table(root, "samples")
    assert set(samples["method"]) == {"base", "grpo"} and set(samples["step"]) == {0, 2, 4}
    assert samples["process_valid"].isna().all() and samples["mode"].isna().all()
    assert set(_table(root, "greedy")["step"]) == {0, 2, 4}
    assert "vllm" not in sys.modules                                      # imported only when chosen


def test_probe_bounds_and_consistency(ran):
    root, _, _ = ran
    samples, tokens = _table(root, "samples"), _table(root, "tokens")
    from transformers import AutoConfig
    V = AutoConfig.from_pretrained((root / "base_model.txt").read_text()).vocab_size
    assert (tokens["entropy"] >= 0).all() and (tokens["entropy"] <= math.log(V)).all()
    assert (tokens["logprob"] <= 0).all() and (samples["logprob_sum"] <= 0).all()
    assert samples["reward"].isin([0, 1]).all()
    assert samples["completion"].map(lambda t: isinstance(t, str)).all()        # for the judge and codebook
    questions = read_table(root / "infer" / "tiny" / "tables" / "questions")
    assert set(samples["question_id"]) == set(questions["question_id"]) and questions["problem"].str.len().min() > 0
    g = tokens.groupby(["step", "question_id", "sample"])
    agg = pd.DataFrame({"lp": g["logprob"].sum(), "h": g["entropy"].mean(), "n": g.size()}).reset_index()
    m = samples.merge(agg, on=["step", "question_id", "sample"], validate="one_to_one")
    assert len(m) == len(samples) == 3 * 2 * 3                   # 3 checkpoints x 2 questions x K = 3
    np.testing.assert_allclose(m["logprob_sum"], m["lp"], rtol=1e-12)
    np.testing.assert_allclose(m["token_entropy_mean"], m["h"], rtol=1e-12)
    assert (m["n_tokens"] == m["n"]).all() and (m["n_tokens"] <= 16).all()
    # sampled at T = 1, top-p = 1: the sampler's log-probs are the teacher-forced ones
    np.testing.assert_allclose(m["sampler_logprob_sum"], m["logprob_sum"], atol=1e-3)
    assert (m["truncated"] == (m["n_tokens"] == 16) & m["truncated"]).all()


def test_passk_counts(ran):
    passk = _table(ran[0], "passk")
    assert set(passk["step"]) == {0, 4} and (passk["n"] == 3).all() and passk["c"].between(0, 3).all()


def test_greedy_is_deterministic(ran, monkeypatch):
    root, _, _ = ran
    monkeypatch.setenv("RCEA_DATA", str(root))
    cfg = load_config("tiny", None, tiny_overrides())
    payload = {"scale": "tiny", "method": "grpo", "step": 4, "adapter": "train/tiny/grpo/checkpoints/checkpoint-4",
               "benchmarks": cfg["eval.benchmarks"]}
    a = run_greedy(payload, cfg, Context("cpu", "hf"), lambda *x: None)[0]["greedy"]
    b = run_greedy(payload, cfg, Context("cpu", "hf"), lambda *x: None)[0]["greedy"]
    pd.testing.assert_frame_equal(a, b)
    stored = _table(root, "greedy")
    stored = stored[stored["step"] == 4].reset_index(drop=True)
    pd.testing.assert_frame_equal(a.sort_values(SORT["greedy"]).reset_index(drop=True), stored, check_dtype=False)


def test_covariance_row_matches_an_independent_recomputation(ran, monkeypatch):
    """Regenerate the prefixes, run both checkpoints as plain PEFT models, apply
    docs/estimators.md#covariance-prediction in numpy fp64."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from infer.backends import SamplingSpec, get_backend

    root, _, _ = ran
    monkeypatch.setenv("RCEA_DATA", str(root))
    cfg = load_config("tiny", None, tiny_overrides())
    base = (root / "base_model.txt").read_text()
    ck = {s: str(root / f"train/tiny/grpo/checkpoints/checkpoint-{s}") for s in (2, 4)}
    sampler = get_backend("hf", base)
    sampler.set_adapter(ck[2])
    models = {s: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), ck[s]).eval() for s in (2, 4)}
    seed, traj, m = cfg["covariance.seed"], cfg["covariance.trajectories"], cfg["covariance.max_positions"]
    preds, obss = [], []
    for q in covariance_questions(cfg):
        prompt = encode(sampler.tokenizer, q["problem"], cfg)
        outs = sampler.generate([prompt] * traj, SamplingSpec(cfg["probe.max_new_tokens"]),
                                seeds=[derive_seed(seed, q["id"], j) for j in range(traj)])
        for j, o in enumerate(outs):
            c = o.token_ids
            pos = np.sort(np.random.default_rng([seed, zlib.crc32(q["id"].encode()), j]).choice(len(c), min(m, len(c)),
                                                                                               replace=False))
            ids = torch.tensor([prompt + c])
            with torch.no_grad():
                z0, z1 = (models[s](input_ids=ids).logits[0, len(prompt) - 1 + pos].double().numpy() for s in (2, 4))
            l0 = z0 - np.log(np.exp(z0 - z0.max(1, keepdims=True)).sum(1, keepdims=True)) - z0.max(1, keepdims=True)
            l1 = z1 - np.log(np.exp(z1 - z1.max(1, keepdims=True)).sum(1, keepdims=True)) - z1.max(1, keepdims=True)
            p0, p1, dz = np.exp(l0), np.exp(l1), z1 - z0
            preds += list(-((p0 * l0 * dz).sum(1) - (p0 * l0).sum(1) * (p0 * dz).sum(1)))
            obss += list(-(p1 * l1).sum(1) + (p0 * l0).sum(1))
    row = _table(root, "covariance").set_index("step_to").loc[4]
    assert row["step_from"] == 2 and row["method"] == "grpo" and row["n_positions"] == len(preds)
    assert row["predicted_delta"] == pytest.approx(np.mean(preds), abs=1e-6)
    assert row["observed_delta"] == pytest.approx(np.mean(obss), abs=1e-6)
    assert row["observed_delta"] != 0.0


def test_missing_checkpoint_fails_with_reason_and_others_go_on(tiny_data):
    _enqueue("greedy")
    (tiny_data / "train/tiny/grpo/checkpoints/checkpoint-2/adapter_model.safetensors").unlink()
    q = Queue(state_path("tiny"))
    stats = run_worker(q, run_job, Context("cpu", "hf"), until_empty=True, poll_s=0.1, display=_Quiet())
    assert stats == {"done": 2, "failed": 1}
    (failed,) = [j for j in q.jobs() if j["state"] == "failed"]
    assert failed["key"] == "greedy:grpo-2" and "checkpoint-2 is missing or incomplete" in failed["error"]
    assert set(_table(tiny_data, "greedy")["step"]) == {0, 4}


def test_kill_minus_9_then_rerun_gives_the_uninterrupted_rows(ran, tiny_data):
    """A worker subprocess is killed mid-job; nothing partial is left; the rerun's tables equal `ran`'s."""
    _enqueue("probe")
    log = tiny_data / "worker.log"
    env = dict(subprocess_env(tiny_data), RCEA_INFER_TEST_SLOWDOWN_S="2")
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "infer", "worker", "--scale", "tiny", "--lease", "4",
                                 "--poll", "0.2"], env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 240
        while "probe questions 1/2" not in log.read_text():  # first question of the first job done
            assert proc.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    q = Queue(state_path("tiny"), lease_s=4)
    (running,) = [j for j in q.jobs() if j["state"] == "running"]
    part = running["key"].replace(":", "-")
    tables = tiny_data / "infer" / "tiny" / "tables"
    assert not list(tables.glob(f"*/{part}.parquet*"))           # nothing of the killed job
    stats = run_worker(q, run_job, Context("cpu", "hf"), until_empty=True, poll_s=0.2, display=_Quiet())
    assert stats["failed"] == 0 and q.counts() == {"pending": 0, "running": 0, "done": 3, "failed": 0}
    assert next(j for j in q.jobs() if j["key"] == running["key"])["attempts"] == 2
    for name in ("samples", "tokens"):
        pd.testing.assert_frame_equal(_table(tiny_data, name), _table(ran[0], name))


def test_two_worker_processes_share_the_queue_and_give_the_same_rows(ran, tiny_data):
    """`infer worker --processes 2` (the tiny study's workers stage): both processes take jobs from the one
    queue, every job is done once, and the tables equal the single in-process worker's (`ran`)."""
    _enqueue("all")
    env = dict(subprocess_env(tiny_data), RCEA_INFER_TEST_SLOWDOWN_S="0.3")  # jobs long enough for both to claim
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "infer", "worker", "--scale", "tiny", "--until-empty",
                        "--processes", "2", "--poll", "0.2", "--progress"], env=env, capture_output=True, text=True,
                       timeout=900)
    log = tiny_data / "logs" / "workers" / "tiny.log"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + log.read_text()[-3000:]
    jobs = Queue(state_path("tiny")).jobs()
    assert {j["state"] for j in jobs} == {"done"} and all(j["attempts"] == 1 for j in jobs)
    assert len({j["worker"] for j in jobs}) == 2, [(j["key"], j["worker"]) for j in jobs]
    # --progress: both workers' own lines in the log; on the terminal the queue's counts only (issue 31)
    assert log.read_text().count("worker finished:") == 2 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines and all(re.fullmatch(r"\[workers\] \d+/\d+ done, \d+ running.*", ln) for ln in lines), lines
    assert lines[-1].startswith(f"[workers] {len(jobs)}/{len(jobs)} done, 0 running")
    assert str(log) in lines[0] and sum(str(log) in ln for ln in lines) == 1   # the log named once, on the first line
    assert len(lines) <= 12 + (time.monotonic() - t0) / 60   # a tenth of the jobs or a minute apart, and the last
    for name in TABLES:
        pd.testing.assert_frame_equal(_table(tiny_data, name), _table(ran[0], name))


def test_processes_is_for_the_tiny_scale_on_cpu(tiny_data, capsys):
    assert cli(["worker", "--scale", "tiny", "--processes", "0"]) == 2
    assert cli(["worker", "--scale", "tiny", "--processes", "2", "--gpu", "0"]) == 2
    assert "--processes is for the tiny scale on CPU" in capsys.readouterr().err


def test_greedy_summary_per_checkpoint(ran):
    from infer.tables import greedy_summary

    root = ran[0]
    s = greedy_summary(root / "infer" / "tiny" / "tables" / "greedy")
    g = _table(root, "greedy")
    row = s[(s["step"] == 4)].iloc[0]
    sub = g[(g["step"] == 4) & (g["benchmark"] == row["benchmark"])]
    assert row["accuracy"] == sub["correct"].mean() and row["mean_tokens"] == sub["n_tokens"].mean()
    assert row["questions"] == 3 and 0 <= row["boxed_rate"] <= 1
