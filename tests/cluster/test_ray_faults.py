"""Failure injection on a real multi-node Ray cluster (ray.cluster_utils.Cluster: a head and two worker
nodes of four fake GPUs each, `train` and `infer` slots): one worker node is removed while it runs units
and one task's worker process is killed. The study still completes, every output is identical to a
clean run's, and the retries show in the driver's log and its unit records (the state store)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from orchestrate.engines import execute
from rcea.state import Store
from tests.cluster.standin import StandIn, expected

ray = pytest.importorskip("ray", reason="the Ray tests run in the tools environment (lockfiles/tools.txt)")

UNITS = [StandIn(f"m{i}", seconds=3) for i in range(10)] + [StandIn(f"t{i}", role="train", seconds=3) for i in range(2)]


@pytest.fixture(scope="module")
def cluster():
    from ray import cloudpickle
    from ray.cluster_utils import Cluster

    from tests.cluster import standin

    cloudpickle.register_pickle_by_value(standin)
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")   # as orchestrate.engines.ray_exec.connect
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=1, num_gpus=4, resources={"train": 4, "infer": 4})
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def test_node_loss_and_a_killed_task_still_complete_the_study(cluster, tmp_path):
    clean = tmp_path / "clean"
    assert not execute(UNITS, "local", data_root=clean, store_path=tmp_path / "clean.sqlite",
                       parallel={"infer": 4, "train": 2}).failed

    faulty, lines, injected = tmp_path / "faulty", [], {}
    workers = {n.node_id: n for n in cluster.worker_nodes}

    def inject(event):
        # First start on a worker node: remove that node (a crash: no graceful shutdown). First start on the
        # other node afterwards: SIGKILL the task's worker process.
        node = event["node"]
        if event["attempt"] != 1 or node not in workers:
            return
        if "removed" not in injected:
            injected["removed"] = (node, event["keys"][0])
            threading.Thread(target=cluster.remove_node, args=(workers[node],), kwargs={"allow_graceful": False},
                             daemon=True).start()
        elif "killed" not in injected and node != injected["removed"][0]:
            injected["killed"] = event["keys"][0]
            os.kill(event["pid"], signal.SIGKILL)

    report = execute(UNITS, "ray", data_root=faulty, store_path=tmp_path / "faulty.sqlite", fake_gpus=True,
                     max_retries=3, log=lines.append, on_event=inject)
    assert {"removed", "killed"} <= set(injected), injected
    assert report.failed == {} and sorted(report.done) == sorted(u.key for u in UNITS)
    for u in UNITS:   # identical to the clean run, and to what the unit's spec says
        assert u.output(faulty).read_bytes() == u.output(clean).read_bytes()
        assert u.output(faulty).read_text() == expected(u.name)
    records = Store(tmp_path / "faulty.sqlite")
    retried = {u.key for u in UNITS if records.state(u.key)["attempts"] > 1}
    assert injected["killed"] in retried and injected["removed"][1] in retried
    logged = {ln.split()[1].rstrip(":,") for ln in lines if ln.startswith("[retry]")}
    assert retried <= logged and report.retries >= 2
