"""The resource plan's data (configs/plan.toml): cards, decoder shapes, assumptions; each scale's target cards
(the `[targets]` table of its configs/scales/<scale>.toml).

Standard library only. Units: memory in GiB (2**30 bytes) unless a name says bytes, compute in bf16 dense
TFLOPs (1e12 FLOP/s), bandwidth in GB/s (1e9 B/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rcea.config import ConfigError, read_toml
from rcea.paths import configs_dir

GIB = 2 ** 30


@dataclass(frozen=True)
class Card:
    name: str
    memory_gib: float
    bf16_tflops: float
    bandwidth_gbs: float
    note: str = ""


@dataclass(frozen=True)
class Shape:
    """A Qwen2-layout decoder: grouped-query attention (head_dim = hidden / heads), SwiGLU MLP."""
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    context: int
    assumed: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token: 2 x layers x kv_heads x head_dim x dtype bytes (vLLM's sizing)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def params(self) -> int:
        """Parameters: embeddings (+ an untied head), per layer q/k/v (with biases), o, the MLP and two norms."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        per_layer = h * h + h + 2 * (h * kv + kv) + h * h + 3 * h * self.intermediate + 2 * h
        return self.vocab * h * (1 if self.tied else 2) + self.layers * per_layer + h


@lru_cache(maxsize=4)
def _table(cdir: str) -> dict:
    from pathlib import Path

    return read_toml(Path(cdir) / "plan.toml")


def table() -> dict:
    return _table(str(configs_dir()))


def assume(key: str) -> float:
    return table()["assume"][key]


def cards() -> dict[str, Card]:
    return {name: Card(name, float(c["memory_gib"]), float(c["bf16_tflops"]), float(c["bandwidth_gbs"]),
                       c.get("note", "")) for name, c in table()["cards"].items()}


def card(name: str) -> Card:
    known = cards()
    if name not in known:
        raise ConfigError(f"unknown card {name!r}; valid cards: {', '.join(known)} (configs/plan.toml [cards])")
    return known[name]


def shape(model: str) -> Shape:
    models = table()["models"]
    if model not in models:
        raise ConfigError(f"no decoder shape for model {model!r} in configs/plan.toml [models]; add its hidden, "
                          f"layers, heads, kv_heads, intermediate, vocab, tied, context (known: {', '.join(models)})")
    return Shape(model, **models[model])


def targets(scale: str) -> dict[str, list[str]]:
    """{"train": [cards], "infer": [cards]} a scale must fit: the `[targets]` table of its own file
    (configs/scales/<scale>.toml), so a scale is one file; a GPU scale without one is an error naming the fix."""
    from pathlib import Path

    path = Path(configs_dir()) / "scales" / f"{scale}.toml"
    t = read_toml(path).get("targets") if path.exists() else None
    if not isinstance(t, dict) or not all(isinstance(t.get(role), list) for role in ("train", "infer")):
        raise ConfigError(f"configs/scales/{scale}.toml has no [targets]: name the cards scale {scale} must fit "
                          f"(train = [...], infer = [...], of {', '.join(cards())})")
    return {"train": list(t["train"]), "infer": list(t["infer"])}
