"""rcea.seeds: the per-process set-up every tiny-model step shares."""

def test_tiny_model_processes_use_one_cpu_thread_unless_omp_num_threads_says_otherwise():
    import os
    import subprocess
    import sys

    code = "from rcea.seeds import limit_cpu_threads; import torch; torch.set_num_threads(2); " \
           "limit_cpu_threads(); print(torch.get_num_threads())"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run = lambda e: subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,  # noqa: E731
                                   check=True).stdout.strip()
    assert run(env) == "1"
    assert run({**env, "OMP_NUM_THREADS": "2"}) == "2"
