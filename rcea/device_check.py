"""Shared by the device checks (infer.gpu_check, train.gpu_check): the real shapes of each GPU scale's model and
the PASS/FAIL/SKIP report.

`SHAPES` holds, for every scale whose model (`model.name`) has a decoder shape in configs/plan.toml `[models]`
(the planner's, from the published configs: 3b and 7b), that shape, and `tiny`, a small shape for CPU runs of the
same code; `GPU_SCALES` are the former, so a scale file of a known model is a device-check shape with no edit here.
`random_model(shape)` builds a random-initialised Qwen2 model of that shape in memory: no download, no
network, the same matrix sizes as the real model (so memory and speed match; the numbers it computes do
not).
"""

from __future__ import annotations

CPU_SHAPE = "tiny"
TINY = dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
# configs/plan.toml [models] names -> Qwen2Config's
QWEN2_FIELDS = {"vocab": "vocab_size", "hidden": "hidden_size", "intermediate": "intermediate_size",
                "layers": "num_hidden_layers", "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
                "tied": "tie_word_embeddings"}


def scale_shapes() -> dict[str, dict]:
    """{scale: Qwen2Config keyword arguments} of every scale whose model has a shape in configs/plan.toml, in
    the order of rcea.config.SCALES; then the CPU shape `tiny`."""
    from rcea.config import SCALES, base_value, read_toml
    from rcea.paths import configs_dir

    models = read_toml(configs_dir() / "plan.toml").get("models", {})
    out = {}
    for scale in SCALES:
        path = configs_dir() / "scales" / f"{scale}.toml"
        model = read_toml(path).get("model", {}).get("name", base_value("model.name"))
        if model in models:
            out[scale] = {QWEN2_FIELDS[k]: v for k, v in models[model].items() if k in QWEN2_FIELDS}
    return {**out, CPU_SHAPE: dict(TINY)}


SHAPES = scale_shapes()
GPU_SCALES = tuple(s for s in SHAPES if s != CPU_SHAPE)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def qwen2_config(shape: str, layers: int | None = None):
    from transformers import Qwen2Config

    s = dict(SHAPES[shape])
    if layers:
        s["num_hidden_layers"] = layers
    return Qwen2Config(**s, max_position_embeddings=32_768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                       bos_token_id=0, eos_token_id=2, pad_token_id=0)


def random_model(shape: str, dtype=None, device: str = "cpu", layers: int | None = None, seed: int = 0):
    """Random-initialised Qwen2ForCausalLM of `shape`, built directly on `device` in `dtype`."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(qwen2_config(shape, layers))
    # RoPE frequencies stay fp32, as in a model loaded with from_pretrained(dtype=bf16) and in vLLM: cast to
    # bf16 they are off by up to 2^-8, which turns into radians of rotation error 2,000 positions in
    inv_freq = {n: b.clone() for n, b in model.named_buffers() if n.endswith("inv_freq")}
    model = model.to(dtype or torch.float32)
    for name, b in inv_freq.items():
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._buffers[leaf] = b
    return model.eval()


def lora_params(shape: str, rank: int, layers: int | None = None) -> int:
    """Trainable parameters of a rank-`rank` LoRA on every projection, by hand: r x (in + out) per matrix."""
    s = SHAPES[shape]
    h, m = s["hidden_size"], s["intermediate_size"]
    kv = s["num_key_value_heads"] * (h // s["num_attention_heads"])
    per_layer = (h + h) + 2 * (h + kv) + (h + h) + 2 * (h + m) + (m + h)   # q, k+v, o, gate+up, down
    return rank * per_layer * (layers or s["num_hidden_layers"])


def check_parser(module: str, doc: str | None, shapes_help: str):
    """The command line both device checks share: --cpu, --shapes and the hidden --_part of a child run."""
    import argparse

    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="tiny shape on CPU (CI); the default needs a CUDA GPU")
    p.add_argument("--shapes", default=",".join(GPU_SCALES), help=shapes_help)
    p.add_argument("--_part", nargs="+", default=None, help=argparse.SUPPRESS)
    return p


def gpu_present() -> bool:
    """True with a CUDA GPU (its name printed); else says what to run instead."""
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU visible: run this on a GPU host (or `--cpu` for the tiny-shape version)")
        return False
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    return True


def finish(results: list[dict], t0: float) -> int:
    """The report, then one verdict line with the elapsed time; the exit status."""
    import time

    ok = report(results)
    print(f"{'GPU CHECK PASSED' if ok else 'GPU CHECK FAILED'} ({time.perf_counter() - t0:.0f} s)")
    return 0 if ok else 1


def report(results: list[dict]) -> bool:
    """Print one line per check (`{"check", "ok", "detail"}` or `{"check", "skip"}`); True iff none failed."""
    for r in results:
        if "skip" in r:
            print(f"SKIP {r['check']}: {r['skip']}")
        else:
            print(f"{'PASS' if r['ok'] else 'FAIL'} {r['check']}: {r['detail']}")
    return all(r.get("ok", True) for r in results)


def prediction_table(predicted: dict, measured: dict) -> list[str]:
    """The planner's prediction (train/plan.py) against what a device check measured, one line per stage named in
    either: {stage: (peak GiB or None, seconds per step or None)}, and measured / predicted where both exist."""
    def num(x, width: int) -> str:
        return f"{'-':>{width}}" if x is None else f"{x:{width}.1f}"

    def ratio(m, p):
        return "-" if m is None or p is None or p <= 0 else f"{m / p:.2f}"

    width = max([len("stage"), *map(len, predicted), *map(len, measured)])
    lines = [f"{'stage':<{width}} {'GiB pred':>9} {'GiB meas':>9} {'ratio':>6} {'s pred':>8} {'s meas':>8} {'ratio':>6}"]
    for stage in [*predicted, *[k for k in measured if k not in predicted]]:
        (pg, ps), (mg, ms) = predicted.get(stage, (None, None)), measured.get(stage, (None, None))
        lines.append(f"{stage:<{width}} {num(pg, 9)} {num(mg, 9)} {ratio(mg, pg):>6} "
                     f"{num(ps, 8)} {num(ms, 8)} {ratio(ms, ps):>6}")
    return lines


def run_part(module: str, args: list[str], dispatch, timeout: float | None = None) -> dict:
    """One check: on CPU in this process (faster; no GPU memory to isolate), on a GPU in a fresh
    `python -m <module> --_part ...` process so its peak memory is its own. A crash, or a child still running
    after `timeout` seconds, becomes a FAIL line with the end of its error output, and the other checks still
    run. The child's result is the last line of its standard output that parses as a JSON object (engines
    may log to standard output too)."""
    import json
    import subprocess
    import sys

    if "cpu" in args:
        try:
            return dispatch(args)
        except Exception as exc:  # noqa: BLE001 - reported as a FAIL line
            return {"check": args[0], "ok": False, "detail": f"crashed: {type(exc).__name__}: {exc}"}
    try:
        out = subprocess.run([sys.executable, "-m", module, "--_part", *args], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return {"check": args[0], "ok": False, "detail": f"still running after {timeout:.0f} s, stopped: "
                                                         + err.strip()[-1000:]}
    if out.returncode != 0:
        return {"check": args[0], "ok": False, "detail": "crashed: " + out.stderr.strip()[-1500:]}
    for line in reversed(out.stdout.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {"check": args[0], "ok": False, "detail": "no result line in its output: " + out.stdout.strip()[-500:]}
