"""Elastic GPUs (issue 39): rcea.launch's rule places a study's work on the host's GPUs (or CPU cores), and the
local engine hands each training slot freed once no run is left to start to a measurement worker (`on_idle`)."""

from __future__ import annotations

import sys
import time

import pytest

from rcea.launch import launch, split
from tests.cluster.standin import StandIn


@pytest.mark.parametrize("gpus, train, measure", [
    (1, (0,), ()),                         # one GPU: it trains, then measures (no worker at the start)
    (2, (0, 1), ()),                       # 7 runs on 2 GPUs: both train; the base policy waits for a freed one
    (4, (0, 1, 2, 3), ()),
    (8, (0, 1, 2, 3, 4, 5, 6), (7,)),      # 7 runs, one each; the eighth measures from the start
])
def test_the_rule_on_1_2_4_8_gpus(gpus, train, measure):
    place = launch("3b").placement(7, 8, gpus)
    assert (place.train, place.measure) == (train, measure)
    assert place.workers == (*measure, *train) and place.first == len(measure)   # every GPU measures in the end
    assert split(range(gpus), 7) == (train, measure)


def test_the_rule_with_fewer_runs_or_workers():
    b3 = launch("3b")
    assert (b3.placement(2, 8, 8).train, b3.placement(2, 8, 8).measure) == ((0, 1), (2, 3, 4, 5, 6, 7))
    assert b3.placement(2, 3, 8).workers == (2, 3, 4)        # --num-workers 3 caps the workers
    assert b3.placement(7, 2, 8).workers == (7, 0)           # the one measuring GPU, then GPU 0 once freed
    assert b3.placement(1, 8, None).train == (0,)            # host unknown: compose.yaml's 8 GPUs
    assert split(range(8), 0) == ((), tuple(range(8))) and split(range(3), 5, 2) == ((0, 1), (2,))


def test_the_rule_on_cpu_cores():
    """tiny: slots.train = 2 cores (the processes at once): 7 runs train 2 at a time, no worker at the start,
    both cores measure once freed; one run: the other core measures from the start; --num-workers 3: a third."""
    tiny = launch("tiny")
    assert tiny.placement(7, 2).train == (0, 1) and tiny.placement(7, 2).workers == (0, 1)
    assert tiny.placement(7, 2).first == 0
    one = tiny.placement(1, 2)
    assert (one.train, one.measure, one.workers, one.first) == ((0,), (1,), (1, 0), 1)
    three = tiny.placement(7, 3)
    assert (three.train, three.measure, three.workers) == ((0, 1), (2,), (2, 0, 1))


def _run(units, tmp_path, on_idle, parallel=2, gpus=None):
    from orchestrate.engines import execute

    return execute(units, "local", data_root=tmp_path, store_path=tmp_path / "state.sqlite", log=lambda *a: None,
                   parallel={"train": parallel}, gpus={"train": gpus or []}, max_retries=0, on_idle=on_idle)


def test_a_slot_freed_after_the_last_run_starts_takes_a_worker(tmp_path):
    """3 stand-in runs, 2 slots: the slot the first run frees goes to the third run (a run waits: no worker); the
    next two freed slots each go to on_idle, after the third run has started; a declined slot is not offered
    again."""
    runs = [StandIn(f"r{i}", role="train", seconds=s) for i, s in enumerate((0.3, 1.5, 0.6))]
    calls = []

    def on_idle(role, gpu):
        started = sorted(p.name.split(".")[0] for p in (tmp_path / "seen").iterdir())
        calls.append((role, gpu, started, time.monotonic()))
        return len(calls) <= 2

    report = _run(runs, tmp_path, on_idle)
    assert sorted(report.done) == sorted(u.key for u in runs) and not report.failed
    assert [c[:3] for c in calls] == [("train", None, ["r0", "r1", "r2"])] * 2   # never before r2 started
    assert len(calls) == 2   # both slots taken; nothing declined, nothing asked twice


def test_a_pinned_slot_hands_over_its_gpu_and_a_declined_one_is_asked_once(tmp_path):
    runs = [StandIn(f"g{i}", role="train", seconds=s) for i, s in enumerate((0.2, 1.0))]
    calls = []
    report = _run(runs, tmp_path, lambda role, gpu: calls.append(gpu) or gpu == 5, gpus=[5, 6])
    assert not report.failed
    assert sorted(calls) == [5, 6] and calls[0] == 5   # GPU 5 freed first (taken), GPU 6 declined once


def test_with_runs_waiting_no_worker_starts(tmp_path):
    runs = [StandIn(f"w{i}", role="train", seconds=0.2) for i in range(4)]
    calls = []
    _run(runs, tmp_path, lambda role, gpu: calls.append(len(list((tmp_path / "seen").iterdir()))) or False,
         parallel=1)
    assert calls == [4]   # asked once, after the fourth (last) run had started; declined: not asked again


def test_the_study_starts_the_workers_on_freed_slots_in_its_background(tmp_path, monkeypatch, capfd):
    """The train stage's `elastic` workers (stand-in commands here) start only once no run is left to start, one
    per freed slot, owned by the background registry (joined by the workers stage, stopped with the study)."""
    from invoke import Config, Context

    from orchestrate.ops import study as st
    from orchestrate.ops.background import BACKGROUND

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.setenv("RCEA_STATE", str(tmp_path / "state.sqlite"))
    marks = tmp_path / "workers"
    marks.mkdir()
    runs = [StandIn(f"s{i}", role="train", seconds=s) for i, s in enumerate((0.2, 1.2, 0.4))]
    worker = [(d, (sys.executable, "-c", f"import os, sys, time; print('worker-noise', file=sys.stderr); "
                                          f"open(os.path.join({str(marks)!r}, str(time.time())), "
                                          f"'w').write(str(len(os.listdir({str(tmp_path / 'seen')!r}))))"), "a slot")
              for d in (0, 1, 2)]
    stage = st.Stage("train", "train", tuple(st.Unit(u.name, (("true",),), u) for u in runs), parallel=2,
                     elastic=tuple(worker))
    try:
        st.run_local(Context(Config(overrides={"run": {"in_stream": False}})), stage, tmp_path / "logs")
        assert len(BACKGROUND.procs) == 3   # two freed slots, then the sweep: the third never trained here
        BACKGROUND.finish()
    finally:
        BACKGROUND.stop()
    seen = [p.read_text() for p in marks.iterdir()]
    assert seen == ["3"] * 3                # each started after the last run had started
    out, err = capfd.readouterr()
    assert "worker-noise" not in err + out   # a worker's own lines: to the study's background log
    assert (tmp_path / "logs" / "background.log").read_text().count("worker-noise") == 3
    assert [f"study: measurement worker {i} of 3 on freed slots starts on a slot" in out for i in (1, 2, 3)] == [True] * 3
    lines = []
    dry = Context(Config(overrides={"run": {"dry": True}}))
    monkeypatch.setattr(st, "run_all", lambda c, cmds, **kw: lines.extend(cmds))
    st.run_local(dry, stage, tmp_path / "logs")
    assert capfd.readouterr().out.count("&   # once training frees a slot and no run is left to start") == 3


@pytest.mark.parametrize("enqueues", [0, 1])
def test_an_all_complete_rerun_starts_no_worker_unless_an_enqueue_finds_work(tmp_path, monkeypatch, capfd, enqueues):
    """Every training run complete (skipped) and the queue's jobs all done: once the stage's background enqueue
    (the base policy's, here a stand-in that takes a moment) has ended, the freed slots start no measurement
    worker; the same rerun whose enqueue leaves a job pending (its table part is gone) starts them all."""
    from invoke import Config, Context

    from infer.queue import Queue
    from orchestrate.ops import study as st
    from orchestrate.ops.background import BACKGROUND
    from rcea.layout import state_path

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.setenv("RCEA_STATE", str(tmp_path / "units.sqlite"))
    runs = [StandIn(f"c{i}", role="train") for i in range(2)]
    for u in runs:   # complete before the stage: skipped
        u.output(tmp_path).parent.mkdir(parents=True, exist_ok=True)
        u.output(tmp_path).write_text("x")
        (u.output(tmp_path).parent / f"{u.name}.txt.manifest.json").write_text('{"artifact": "x"}')
    q = Queue(state_path("tiny", tmp_path))
    q.enqueue("done", "k", {})
    q.finish(q.claim("w").id, "w")
    enqueue = (sys.executable, "-c", "import sys, time; from infer.queue import Queue; time.sleep(0.5); "
                                     f"[Queue(sys.argv[1]).enqueue('redo', 'k', {{}}) for _ in range({enqueues})]",
               str(state_path("tiny", tmp_path)))
    workers = tuple((d, (sys.executable, "-c", "pass"), "a slot") for d in (0, 1))
    stage = st.Stage("train", "train", tuple(st.Unit(u.name, (("true",),), u) for u in runs), parallel=2,
                     background=(enqueue,), quiet=(enqueue,), elastic=workers)
    try:
        st.run_local(Context(Config(overrides={"run": {"in_stream": False}})), stage, tmp_path / "logs")
        started = [argv for argv, _ in BACKGROUND.procs if argv != enqueue]
        BACKGROUND.finish()
    finally:
        BACKGROUND.stop()
    out = capfd.readouterr().out
    assert started == [w[1] for w in workers] * enqueues   # the enqueue was waited for either way
    assert ("study: every measurement job is complete: no measurement worker starts on the 2 slot(s)" in out) \
        == (not enqueues)
    assert out.count("measurement worker") == (1 if not enqueues else 2), out
