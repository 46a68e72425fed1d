"""The `ray` engine of `invoke study`: which stages become Ray work units, and what they hold."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from invoke.exceptions import Exit

from orchestrate.engines.ray_stage import RayStage
from rcea.layout import TRAINER_STATE
from rcea.store import write_manifest
from orchestrate.units import batches


def _fake_run(root, method, steps, max_steps):
    for s in steps:
        d = root / "train" / "tiny" / method / "checkpoints" / f"checkpoint-{s}"
        d.mkdir(parents=True)
        (d / "adapter_config.json").write_text("{}")
        (d / "adapter_model.safetensors").write_text("")
        (d / "trainer_state.json").write_text(json.dumps({"max_steps": max_steps}))
        (d / TRAINER_STATE).write_bytes(b"state")
        write_manifest(d / TRAINER_STATE, step=s)   # written last by training: the checkpoint is complete


def _ctx(dry=False):
    return SimpleNamespace(config=SimpleNamespace(run=SimpleNamespace(dry=dry)))


def test_train_and_workers_become_units_the_rest_runs_locally(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    for m in ("grpo", "dapo"):
        _fake_run(tmp_path, m, (50, 100), 100)
    ran = []
    engine = RayStage("tiny", ["grpo", "dapo"], local=lambda c, stage, log_dir: ran.append(stage.key))
    assert [u.method for u in engine.train_units()] == ["grpo", "dapo"]
    units = engine.measure_units()
    keys = [u.job_key for u in units]
    assert keys.count("greedy:base-0") == 2                       # planned per run ...
    groups = batches(units)
    flat = [u.job_key for g in groups for u in g]
    assert flat.count("greedy:base-0") == 1 and len(flat) == len(set(keys))   # ... run once
    assert {u.payload["adapter"] for g in groups for u in g[:1]} == {
        None, *(f"train/tiny/{m}/checkpoints/checkpoint-{s}" for m in ("grpo", "dapo") for s in (50, 100))}
    for key in ("prepare", "judge", "aggregate"):
        engine(_ctx(), SimpleNamespace(key=key), tmp_path)
    assert ran == ["prepare", "judge", "aggregate"]
    engine(_ctx(dry=True), SimpleNamespace(key="train"), tmp_path)
    assert ("[ray] 2 training run(s), each followed by its measurements as soon as it has finished, as Ray tasks "
            "on a local Ray started here") in capsys.readouterr().out
    grpo = engine.train_units()[0]
    assert {u.job_key for u in engine.after(grpo)} == {u.job_key for u in units if u.payload["method"] in
                                                       ("grpo", "base")}   # what follows a finished run


def test_a_run_without_checkpoints_stops_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    with pytest.raises(Exit, match="train first"):
        RayStage("tiny", ["grpo"]).measure_units()


def test_the_study_chooses_its_engine_by_name():
    from orchestrate.ops import study as st

    engine = st.stage_runner("ray", "3b", ["grpo"], "10.0.0.5:6379")
    assert isinstance(engine, RayStage) and engine.address == "10.0.0.5:6379" and engine.gpus
    assert engine.local is st.run_local
    assert st.stage_runner("ray", "tiny", ["grpo"]).address is None and not st.stage_runner("ray", "tiny", ["grpo"]).gpus
    assert st.stage_runner("local", "tiny", ["grpo"]) is st.run_local
    with pytest.raises(Exit, match="add --engine ray"):
        st.stage_runner("local", "tiny", ["grpo"], "10.0.0.5:6379")
    with pytest.raises(Exit, match="valid choices: local, ray"):
        st.stage_runner("dask", "tiny", ["grpo"])


def test_the_local_engine_runs_a_stage_of_work_units_then_each_completed_one_s_commands(tmp_path, monkeypatch,
                                                                                        capsys):
    """The tiny train stage under `local`: its units run through orchestrate.engines (local.py), two at a time;
    then each completed unit's remaining commands (a run's enqueue); a failed unit runs nothing more and the
    stage stops once the others are done, naming the failure; a rerun skips the complete units."""
    import sys

    from orchestrate.ops import study as st
    from invoke import Config, Context

    from tests.cluster.standin import StandIn, expected

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.setenv("RCEA_STATE", str(tmp_path / "state.sqlite"))
    mark = tmp_path / "after"
    touch = (sys.executable, "-c", f"open({str(mark)!r}, 'a').write('x')")
    ok = [StandIn(f"ok{i}", role="train", seconds=0.2, barrier=2) for i in range(2)]   # barrier: both at once
    stage = st.Stage("train", "train", tuple(st.Unit(u.name, (("true",), touch), u) for u in ok), parallel=2)
    st.run_local(Context(Config(overrides={"run": {"in_stream": False}})), stage, tmp_path / "logs")
    assert mark.read_text() == "xx" and all((tmp_path / "standin" / f"{u.name}.txt").read_text() == expected(u.name)
                                            for u in ok)
    bad = StandIn("bad", role="train", seconds=0.1, exit_code=3)
    stage = st.Stage("train", "train", tuple(st.Unit(u.name, (("true",), touch), u) for u in (bad, *ok)), parallel=2)
    with pytest.raises(Exit) as exc:
        st.run_local(Context(Config(overrides={"run": {"in_stream": False}})), stage, tmp_path / "logs")
    assert mark.read_text() == "xxxx"                       # the complete ones (skipped) still enqueue; bad does not
    assert "1 of 3 unit(s) of stage train failed" in exc.value.message and "standin:bad: exit 3" in exc.value.message
    assert "2 unit(s) already complete, skipped" in capsys.readouterr().out


def test_doctor_reports_ray_and_an_unreachable_head(monkeypatch, capsys):
    from orchestrate.ops import doctor

    facts = doctor.gather_facts()   # this machine's, then only Ray's checks decide the outcome below
    monkeypatch.setattr(doctor, "gather_facts", lambda: {**facts, "shm_bytes": 2 << 30, "free_bytes": 200 << 30,
                                                         "data_writable": True})
    with pytest.raises(Exit, match="ray head"):
        doctor.run_doctor(8, ray_address="127.0.0.1:1")
    out = capsys.readouterr().out
    assert "[OK  ] ray: Ray 2." in out and "[FAIL] ray head: 127.0.0.1:1 unreachable" in out


FAKE_DOCKER = r'''#!{python}
"""A stand-in `docker`: records each call (argv, TRAIN_GPU, start, end); the train container of dapo is killed
once (exit 137, as `docker kill` leaves it), gtpo's fails (exit 3); a run that succeeds leaves its complete run
folder in $RCEA_DATA, the host folder compose.yaml bind-mounts, as the train container does."""
import json, os, sys, time
from pathlib import Path

sys.path.insert(0, os.environ["FAKE_DOCKER_ROOT"])

argv, start = sys.argv[1:], time.time()
train = argv[:5] == ["compose", "run", "--rm", "-T", "train"]
method = argv[argv.index("--method") + 1] if "--method" in argv else None
time.sleep(0.6 if train else 0.0)
with open(os.environ["FAKE_DOCKER_LOG"], "a") as fh:
    fh.write(json.dumps({"argv": argv, "gpu": os.environ.get("TRAIN_GPU"), "train": train, "method": method,
                         "start": start, "end": time.time()}) + "\n")
if train:
    tries = Path(os.environ["FAKE_DOCKER_LOG"]).with_name(f"{method}.tries")
    n = int(tries.read_text()) + 1 if tries.exists() else 1
    tries.write_text(str(n))
    rc = 137 if method == "dapo" and n == 1 else 3 if method == "gtpo" else 0
    if rc == 0:
        from rcea.store import write_manifest

        run = Path(os.environ["RCEA_DATA"]) / "train" / "3b" / method
        run.mkdir(parents=True, exist_ok=True)
        (run / "summary.json").write_text(json.dumps({"config_hash": json.loads(os.environ["FAKE_HASHES"])[method]}))
        write_manifest(run / "summary.json")
    sys.exit(rc)
'''


def test_3b_training_runs_as_container_units_on_several_gpus(tmp_path, monkeypatch, capsys):
    """The 3b train stage under the default engine (it was a sequential list of `docker compose run` commands that
    stopped at the first failure): each run is a unit of the local engine launched as the train container,
    pinned by compose.yaml's TRAIN_GPU to one of the training GPUs, one run per GPU side by side; a killed
    container is retried, a failed run does not stop the others and is named at the end, each run's enqueue
    starts as soon as that run has finished, and every run has its log."""
    import json
    import os
    import sys

    from invoke import Config, Context

    from orchestrate.ops import study as st

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER.replace("{python}", sys.executable))
    (bin_dir / "docker").chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(calls))
    monkeypatch.setenv("RCEA_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("RCEA_STATE", str(tmp_path / "state.sqlite"))
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    methods = ["grpo", "dapo", "gtpo", "kl_cov"]
    train = st.study_stages("3b", methods, host_gpus=8)[1]
    monkeypatch.setenv("FAKE_DOCKER_ROOT", str(Path(__file__).resolve().parents[2]))
    monkeypatch.setenv("FAKE_HASHES", json.dumps({u.work.method: u.work.config_hash for u in train.units}))
    assert train.gpus == (0, 1, 2, 3) and train.parallel == 4      # rcea.launch's rule: one run per GPU
    assert [e[0] for e in train.elastic] == [0, 1, 2, 3]          # each measures once training frees it
    two_gpus = st.Stage("train", train.title, train.units, parallel=2, gpus=(0, 1))   # train_gpus = [0, 1]
    with pytest.raises(Exit) as exc:
        st.run_local(Context(Config(overrides={"run": {"in_stream": False}})), two_gpus, tmp_path / "logs")
    assert "1 of 4 unit(s) of stage train failed" in exc.value.message and ":gtpo:" in exc.value.message
    assert "exit 3" in exc.value.message and "[retry]" in capsys.readouterr().out   # dapo's killed container

    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    runs = [r for r in rows if r["train"]]
    assert sorted(r["method"] for r in runs) == ["dapo", "dapo", "grpo", "gtpo", "kl_cov"]
    assert all(r["argv"][5:] == ["python", "-m", "train", "--method", r["method"], "--scale", "3b", "--resume"]
               for r in runs)
    assert {r["gpu"] for r in runs} == {"0", "1"}
    for a in runs:   # never two runs on one GPU at once; two GPUs busy side by side
        assert not any(b is not a and b["gpu"] == a["gpu"] and b["start"] < a["end"] and a["start"] < b["end"]
                       for b in runs)
    assert any(a["start"] < b["end"] and b["start"] < a["end"] for a in runs for b in runs if a is not b)
    enqueued = {r["method"]: r for r in rows if "enqueue" in r["argv"]}
    assert sorted(enqueued) == ["dapo", "grpo", "kl_cov"]   # not the failed run's
    last_end = max(r["end"] for r in runs)
    assert min(r["start"] for r in enqueued.values()) < last_end   # the first finished run's, while others train
    logs = sorted(p.name for p in (tmp_path / "data" / "logs" / "units").glob("*.log"))
    assert len(logs) == 4 and all(name.startswith("train_3b_") for name in logs)
    # the driver sees the runs the containers finished (one view of the data): a rerun skips them, runs only gtpo
    calls.write_text("")
    with pytest.raises(Exit, match="1 of 4 unit"):
        st.run_local(Context(Config(overrides={"run": {"in_stream": False}})), two_gpus, tmp_path / "logs")
    again = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [r["method"] for r in again if r["train"]] == ["gtpo"]


def test_num_workers_caps_the_measurements_in_flight_on_a_ray_cluster(ray_local, tmp_path):
    """--num-workers on a cluster (a Ray with 8 `infer` slots here): at most that many measurement batches
    run at once (it was ignored under --engine ray); the rest wait for a freed slot and all complete."""
    from orchestrate.engines import execute
    from orchestrate.ops import study as st
    from tests.cluster.standin import StandIn

    assert st.stage_runner("ray", "3b", ["grpo"], "10.0.0.5:6379", 2).cap == 2
    assert st.stage_runner("ray", "3b", ["grpo"], "10.0.0.5:6379").cap is None   # not given: the cluster decides
    units = [StandIn(f"m{i}", seconds=0.4) for i in range(5)]
    report = execute(units, "ray", data_root=tmp_path, store_path=tmp_path / "state.sqlite", fake_gpus=True,
                     limit={"infer": 1})
    assert sorted(report.done) == sorted(u.key for u in units) and not report.failed
    # each unit's run, from its start mark to its output (their files' times; counting at the driver's drain of
    # the start events saw 0 in flight under load, the unit already done): one at a time, never overlapping
    # (two CPUs here would run two at once)
    runs = sorted((next((tmp_path / "seen").glob(f"{u.name}.*")).stat().st_mtime, u.output(tmp_path).stat().st_mtime)
                  for u in units)
    assert len(runs) == 5 and all(start >= end for (_, end), (start, _) in zip(runs, runs[1:])), runs


WORKER = r'''
import json, sys, time
from infer.queue import Queue
from infer.worker import run_worker

class Quiet:
    stream, t0 = sys.stderr, 0.0
    def start(self, job): pass
    def __call__(self, *a): pass

def run(payload, ctx, display):
    time.sleep(0.2)
    return {}

print(json.dumps(run_worker(Queue(sys.argv[1]), run, until_empty=True, poll_s=0.05, name="bg", display=Quiet())))
'''


def test_the_local_engine_measures_each_run_while_the_others_still_train(tmp_path, monkeypatch):
    """Issue 28: under the default engine the measurement workers start with the train stage (the queue held open
    by the real `python -m infer hold`), so the job a run enqueues when it finishes starts while another run still
    trains; the workers stage closes the queue and joins that worker (it is not started a second time), and a
    study stopped by a failed run leaves no worker running and the queue closed."""
    import sys

    from invoke import Config, Context

    from infer.queue import Queue
    from orchestrate.ops import study as st
    from rcea.layout import state_path
    from tests.cluster.standin import StandIn

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.setenv("RCEA_STATE", str(tmp_path / "state.sqlite"))
    qpath = state_path("tiny", tmp_path)
    enqueue = lambda key: (sys.executable, "-c", f"from infer.queue import Queue; Queue({str(qpath)!r}).enqueue({key!r}, 'k', {{}})")  # noqa: E731
    worker = (sys.executable, "-c", WORKER, str(qpath))
    hold = (sys.executable, "-m", "infer", "hold", "--scale", "tiny", "--beat", "0.2")
    runs = [StandIn("fast", role="train", seconds=0.3), StandIn("slow", role="train", seconds=4.0)]

    def stages(units):
        train = st.Stage("train", "train", tuple(st.Unit(u.name, (("true",), enqueue(f"m:{u.name}")), u) for u in units),
                         parallel=2, hold=hold, background=(worker,))
        return [train, st.Stage("workers", "workers", (st.Unit("workers", (worker,)),), closes=True)]

    c = Context(Config(overrides={"run": {"in_stream": False}}))
    st.run_study(c, stages(runs), log_dir=tmp_path / "logs")
    q = Queue(qpath)
    jobs = {j["key"]: j for j in q.jobs()}
    assert set(jobs) == {"m:fast", "m:slow"} and {j["state"] for j in jobs.values()} == {"done"}
    assert {j["worker"] for j in jobs.values()} == {"bg"}   # the background worker ran both: no second worker
    slow_done = (tmp_path / "standin" / "slow.txt").stat().st_mtime
    assert jobs["m:fast"]["started"] < slow_done - 1.0      # measured while the slow run still trained
    assert not q.is_open() and st.BACKGROUND.holder is None and not st.BACKGROUND.procs

    bad = [StandIn("bad", role="train", seconds=0.2, exit_code=3), StandIn("slow2", role="train", seconds=1.0)]
    started = []
    real_start = st.BACKGROUND.start
    monkeypatch.setattr(st.BACKGROUND, "start", lambda *a, **kw: (real_start(*a, **kw), started.extend(
        p for _, p in st.BACKGROUND.procs)))
    with pytest.raises(Exit, match="1 of 2 unit"):
        st.run_study(c, stages(bad), log_dir=tmp_path / "logs")
    assert started and all(p.poll() is not None for p in started)   # the background worker was stopped
    assert not q.is_open() and not st.BACKGROUND.procs and q.counts()["running"] == 0
    assert q.jobs()[-1]["key"] == "m:slow2"   # enqueued; a rerun measures it (the local workers were stopped)


def test_infer_gpus_never_take_a_training_gpu(tmp_path):
    """configs/scales/*.toml [launch] train_gpus / infer_gpus override rcea.launch's rule: a GPU listed for
    training and for the workers is refused with the fix; [] leaves the GPUs to the rule (training first)."""
    import shutil

    from rcea.config import ConfigError
    from rcea.launch import launch
    from rcea.paths import configs_dir

    # (train_gpus, infer_gpus, (training GPUs, GPUs measuring from the start) of 7 runs on an 8-GPU host)
    for i, (gpus, infer, expect) in enumerate((("[0, 1]", "[]", ((0, 1), (2, 3, 4, 5, 6, 7))),
                                               ("[0]", "[4, 5]", ((0,), (4, 5))),
                                               ("[]", "[4, 5]", ((0, 1, 2, 3, 6, 7), (4, 5))),
                                               ("[0, 1]", "[1, 2]", "share GPU"))):
        root = tmp_path / f"c{i}"
        shutil.copytree(configs_dir(), root)
        f = root / "scales" / "3b.toml"
        f.write_text(f.read_text().replace("train_gpus = []", f"train_gpus = {gpus}")
                     .replace("infer_gpus = []", f"infer_gpus = {infer}"))
        if isinstance(expect, str):
            with pytest.raises(ConfigError, match=expect):
                launch("3b", root)
        else:
            place = launch("3b", root).placement(7, 8, 8)
            assert (place.train, place.measure) == expect
            assert place.workers == (*expect[1], *expect[0])[:8] and not set(place.measure) & set(place.train)


DRIVER = r'''
import sys
from invoke import Config, Context
from orchestrate.ops import study as st
from tests.cluster.standin import StandIn

pidfile, qpath = sys.argv[1], sys.argv[2]
sleeper = (sys.executable, "-c", f"import os, time; open({pidfile!r}, 'w').write(str(os.getpid())); time.sleep(120)")
hold = (sys.executable, "-m", "infer", "hold", "--scale", "tiny", "--beat", "0.2")
run = StandIn("long", role="train", seconds=60.0)
train = st.Stage("train", "train", (st.Unit("long", (("true",),), run),), hold=hold, background=(sleeper,))
st.run_study(Context(Config(overrides={"run": {"in_stream": False}})), [train])
'''


def test_ctrl_c_in_the_train_stage_stops_the_background_workers_and_closes_the_queue(tmp_path):
    """Ctrl-C while the study trains: the measurement workers started in the background end with the study
    (orchestrate.ops.interrupt stops every child), the holder closes the queue on its way out, and the study
    exits 130 with its one line."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from infer.queue import Queue, process_alive
    from rcea.layout import state_path

    pidfile, qpath = tmp_path / "worker.pid", state_path("tiny", tmp_path)
    env = dict(os.environ, RCEA_DATA=str(tmp_path), RCEA_STATE=str(tmp_path / "state.sqlite"))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(pidfile), str(qpath)], cwd=st_root(), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert Queue(qpath).is_open()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted (Ctrl-C)" in err, out + err
    worker = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while process_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(worker)               # the background worker is gone (not left waiting)
    assert not Queue(qpath).is_open()              # the holder closed the queue on SIGTERM


def st_root() -> str:
    from orchestrate.ops.shell import ROOT

    return str(ROOT)
