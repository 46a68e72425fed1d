"""A worker: claim a job, keep its lease alive from a heartbeat thread, run it, record done or failed.

One worker per GPU (`--gpu N` pins it), or one CPU worker on the tiny scale. A job that raises is marked
failed with its reason and the worker goes on; a worker killed at any moment leaves no output for the
job it held (outputs are written atomically at the end), and the job returns to the queue at once
when a worker on the same host sees the holder's process is gone, else when its lease runs out (a
waiting worker says which job it waits for, its holder and the seconds left, every `report_s`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Callable

from rcea import layout
from rcea.progress import duration, timing

from infer.queue import Job, Queue, worker_name

Runner = Callable[[dict, "Context", Callable[[str, int, int], None]], dict]


def resolve_model(cfg) -> str:
    """The tiny model (built on demand), a local copy under data/models/, or a snapshot at model.revision."""
    from rcea.launch import tiny_model
    from rcea.tiny import model_path

    if tiny_model(cfg):
        return model_path(cfg)
    name = cfg["model.name"]
    for local in (layout.models_dir(name), layout.models_dir(name.split("/")[-1])):
        if (local / "config.json").exists():
            from rcea.hub import record

            record("model", name, f"local-copy:{local.name}")
            return str(local)
    return model_path(cfg)   # a local snapshot at model.revision


class Context:
    """The backends of one worker, built on first use and kept across jobs. They serve one base model at a time:
    the scale's (resolve_model), or an outside run's own (a job payload's `base_model`, a folder relative to the
    data folder: infer.plan.outside_base), set per job by `for_job`; a job over another base than the one held
    shuts the held backends down and builds them over that base (the vLLM engine's model is that folder, LoRA
    enabled; the same placement), so consecutive jobs of one base share one load."""

    def __init__(self, device: str = "cpu", backend: str = "auto"):
        self.device, self.backend = device, backend
        self._gen = self._scorer = None
        self.tokenizer = None
        self.model_path: str | None = None   # the base model folder the held backends serve
        self._job_base: str | None = None    # the job's own base (payload `base_model`), None: the scale's
        self._scale_base: tuple[str, str] | None = None   # (config hash, resolve_model's folder)

    def for_job(self, payload: dict) -> None:
        """Serve the next job over its own base model when its payload names one (infer.jobs.run_job calls it)."""
        self._job_base = payload.get("base_model") or None

    def _base_path(self, cfg) -> str:
        if self._job_base:
            from rcea.paths import data_dir

            from infer.kinds.common import JobInputError

            path = data_dir() / self._job_base
            if not (path / "config.json").exists():
                raise JobInputError(f"the base model {self._job_base} this outside run is measured over is missing "
                                    "from the data folder; run its `invoke measure-run ... --base-differs` again")
            return str(path)
        if self._scale_base is None or self._scale_base[0] != cfg.hash():
            self._scale_base = (cfg.hash(), resolve_model(cfg))
        return self._scale_base[1]

    def close(self) -> None:
        """Shut the held backends down and give their memory back (vLLM's own cleanup, then the GPU cache)."""
        gen, self._gen, self._scorer, self.tokenizer, self.model_path = self._gen, None, None, None, None
        close = getattr(gen, "_close", None)   # a vLLM engine (infer.backends.vllm_backend); the HF one has none
        if close is not None:
            close()
        del gen
        import gc

        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def backends(self, cfg):
        path = self._base_path(cfg)
        if self._scorer is not None and path != self.model_path:
            self.close()
        if self._scorer is None:
            from infer.backends import get_backend
            from infer.kinds import token_budget
            from rcea.data import stop_strings
            from rcea.lora_ranks import max_lora_rank

            choice = self.backend
            if choice == "auto":
                choice = "vllm" if self.device.startswith("cuda") and _has_vllm() else "hf"
            where = placement(cfg, self.device, choice)
            stops = stop_strings(cfg)   # data.stop_tokens: both generators end completions there
            scorer = get_backend("hf", path, device=where["scorer_device"], dtype=where["scorer_dtype"],
                                 batch_size=cfg["measure.scorer_batch"], chunk=cfg["probe.entropy_chunk"],
                                 stop_tokens=stops)
            self.tokenizer = scorer.tokenizer
            self._gen = scorer if choice == "hf" else get_backend(
                "vllm", path, max_lora_rank=max_lora_rank(cfg["train.lora_rank"]), stop_tokens=stops,
                max_model_len=cfg["data.context_tokens"] + token_budget(cfg),   # prompt + the longest generation
                **where["engine"])
            if where["one_copy"]:
                from infer.backends.one_copy import OneCopy

                scorer = OneCopy(self._gen, scorer, self.device)
            self._scorer, self.model_path = scorer, path
        return self._gen, self._scorer

    def describe(self) -> dict:
        scorer = getattr(self._scorer, "scorer", self._scorer)   # OneCopy's scorer
        return {"generate": type(self._gen).__name__ if self._gen else None,
                "score": type(scorer).__name__ if scorer else None,
                "one_weight_copy": self._scorer is not scorer, "device": self.device,
                "logits_dtype": "float32", "entropy_sums": "fp32 blocks of 1024, fp64 across blocks"}


def placement(cfg, device: str, generator: str) -> dict:
    """Where a worker's models live, decided from the device here only. On a CUDA device with a vLLM engine and
    measure.one_weight_copy, one copy of the weights at a time (infer.backends.one_copy): the scorer in host
    memory in bf16 (the dtype it scores in on a GPU), the engine built able to sleep. The engine reserves
    measure.gpu_memory_utilization of a GPU. On CPU as before: everything in host memory, vLLM's CPU engine
    (CI's Compose rehearsal) without torch.compile, which costs minutes at start-up, and never asleep (vLLM
    sleeps on CUDA only; there is no GPU memory to free)."""
    cuda = device.startswith("cuda")
    one = cuda and generator == "vllm" and bool(cfg["measure.one_weight_copy"])
    engine = {"gpu_memory_utilization": cfg["measure.gpu_memory_utilization"]} if cuda else {"enforce_eager": True}
    if one:
        engine["enable_sleep_mode"] = True
    return {"one_copy": one, "scorer_device": "cpu" if one else device, "scorer_dtype": "bfloat16" if one else "auto",
            "engine": engine}


def _has_vllm() -> bool:
    from importlib.util import find_spec
    return find_spec("vllm") is not None


class Heartbeat(threading.Thread):
    def __init__(self, queue: Queue, job: Job, worker: str):
        super().__init__(daemon=True)
        self.queue, self.job, self.worker = queue, job, worker
        self.stopped, self.lost = threading.Event(), False

    def run(self) -> None:
        while not self.stopped.wait(max(0.2, self.queue.lease_s / 3)):
            if not self.queue.heartbeat(self.job.id, self.worker):
                self.lost = True
                return


def _report_wait(name: str, queue: Queue, stream) -> None:
    """One line: the jobs other workers hold, their holders and the seconds left on their leases."""
    held = queue.held()
    what = "; ".join(f"{h['key']} held by {h['worker']}, {h['left_s']:.0f}s left on its lease" for h in held[:3])
    more = f" (+{len(held) - 3} more)" if len(held) > 3 else ""
    print(f"[{name}] nothing pending; waiting for {what}{more}", file=stream, flush=True)


class Display:
    """One progress line per update on stderr (rate-limited), in rcea.progress's format, e.g.
    `[w] probe:grpo-50: probe questions 12/200 | 31s, ~7m 46s left` (plain lines: workers log to files)."""

    def __init__(self, name: str, stream=sys.stderr):
        self.name, self.stream, self.job, self.t0, self.last = name, stream, "", 0.0, 0.0
        self.slowdown = float(os.environ.get("RCEA_INFER_TEST_SLOWDOWN_S", "0"))  # fault-injection for tests

    def start(self, job: Job) -> None:
        self.job, self.t0 = job.key, time.time()
        print(f"[{self.name}] {job.key}: started (attempt {job.attempts})", file=self.stream, flush=True)

    def __call__(self, what: str, done: int, total: int) -> None:
        now = time.time()
        if now - self.last > 2.0 or done == total:
            print(f"[{self.name}] {self.job}: {what} {done}/{total} | {timing(now - self.t0, done, total)}",
                  file=self.stream, flush=True)
            self.last = now
        if self.slowdown:
            time.sleep(self.slowdown)


def run_worker(queue: Queue, runner: Runner, ctx=None, until_empty: bool = False, poll_s: float = 5.0,
               name: str | None = None, display: Display | None = None, report_s: float = 30.0) -> dict:
    """Claim and run jobs; with `until_empty`, stop when nothing is pending or running and the queue is not open
    (a study that may still enqueue holds it open: infer.queue). Returns counts."""
    name = name or worker_name()
    display = display or Display(name)
    stats = {"done": 0, "failed": 0}
    reported = float("-inf")
    while True:
        job = queue.claim(name)
        if job is None:
            counts = queue.counts()
            if until_empty and queue.drained(counts):
                return stats
            if counts["running"] and time.monotonic() - reported >= report_s:
                _report_wait(name, queue, display.stream)
                reported = time.monotonic()
            time.sleep(poll_s)
            continue
        beat = Heartbeat(queue, job, name)
        beat.start()
        display.start(job)
        error = None
        try:
            summary = runner(job.payload, ctx, display)
            print(f"[{name}] {job.key}: done {summary} in {duration(time.time() - display.t0)}", file=display.stream,
                  flush=True)
        except Exception as exc:  # a failing job must not stop the others
            error = f"{type(exc).__name__}: {exc}"
            print(f"[{name}] {job.key}: FAILED {error}\n{traceback.format_exc(limit=3)}", file=display.stream,
                  flush=True)
        finally:
            beat.stopped.set()
            beat.join()
        if beat.lost:
            print(f"[{name}] {job.key}: lease lost; another worker owns it now", file=display.stream, flush=True)
            continue
        queue.finish(job.id, name, error)
        stats["failed" if error else "done"] += 1
