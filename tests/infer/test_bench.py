"""The benchmark helpers on small inputs (the full run is `python -m benchmarks.infer`)."""

import numpy as np

from benchmarks.infer import queue_bench, skewed_durations
from infer.entropy_bench import _chunked, _inputs, _naive


def test_bench_methods_agree():
    hidden, weight, targets = _inputs(64, 16, 3000, "cpu")
    lp_n, h_n = _naive(hidden, weight, targets)
    lp_c, h_c = _chunked(hidden, weight, targets, chunk=10)
    np.testing.assert_allclose(lp_c.numpy(), lp_n.numpy(), atol=1e-5)
    np.testing.assert_allclose(h_c.numpy(), h_n.numpy(), atol=1e-5)


def test_skewed_workload_and_queue_utilisation():
    d = np.array(skewed_durations(160, 48.0))
    assert abs(d.sum() - 48.0) < 1e-9 and d.max() > 5 * np.median(d)      # skewed: a heavy right tail
    r = queue_bench(workers=4, n_jobs=40, total_s=4.0, order="cost")
    assert r["makespan_s"] >= r["ideal_s"] - 0.05                          # cannot beat the work bound
    assert r["busy"] >= 0.8                                                # loose: shared CI CPUs


def test_benchmark_runs_as_a_module_of_the_benchmarks_folder():
    import subprocess
    import sys

    from rcea.paths import project_root

    out = subprocess.run([sys.executable, "-m", "benchmarks.infer", "--help"], cwd=project_root(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "python -m benchmarks.infer" in out.stdout
