"""Real Ray on this CPU machine. One Ray instance per test module (start-up costs seconds): a local node
with two CPUs and eight fake GPUs, offering `train` and `infer` slots like the cluster's worker nodes.
The stand-in units (tests/cluster/standin.py) are pickled by value, so Ray's workers need not import tests/."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray", reason="the Ray tests run in the tools environment (lockfiles/tools.txt)")


@pytest.fixture(scope="module")
def ray_local():
    from ray import cloudpickle

    from tests.cluster import standin

    cloudpickle.register_pickle_by_value(standin)
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")   # as orchestrate.engines.ray_exec.connect
    # address="local": a Ray of its own even while another test's cluster (test_ray_faults.py, here or in a
    # second checkout on this machine) is named in /tmp/ray/ray_current_cluster.
    ray.init(address="local", num_cpus=2, num_gpus=8, resources={"train": 8, "infer": 8}, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()
