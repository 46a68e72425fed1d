"""Reading the RCEA sample tables (``rcea.schema``) and turning key columns into integer codes.

A dataset directory holds each table as ``DIR/<table>.parquet`` or as a folder ``DIR/<table>/`` of
Parquet parts. A missing table is reported (``Dataset.notes``), never fatal: the pipeline then skips
the outputs that need it. A part that cannot be read (truncated, not Parquet) or lacks a required
column raises ``BadParts`` naming every such file and its reason, so a table is never silently partial;
with ``skip_bad_parts`` those files are left out and listed in ``Dataset.skipped``. String key columns are read dictionary-encoded so a
46M-row token table costs integer codes, not Python strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from rcea.schema import TABLES, check_types

STRING_KEYS = ("scale", "method", "question_id", "benchmark")


@dataclass
class Dataset:
    """The tables found (pyarrow Tables, schema-checked) and a note per table that is not usable."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"table", "file", "reason"} per bad part
    parts: list[Path] = field(default_factory=list)  # the Parquet files read (their manifests: aggregate.made_with)

    def has(self, name: str) -> bool:
        return name in self.tables and self.tables[name].num_rows > 0


class BadParts(ValueError):
    """Parquet parts that cannot be used; ``bad`` is [{"table", "file", "reason"}, ...]."""

    def __init__(self, bad: list[dict[str, str]]):
        self.bad = bad
        super().__init__(f"{len(bad)} unusable input file(s): " + "; ".join(f"{b['file']}: {b['reason']}" for b in bad))


MANIFEST_SUFFIX = ".manifest.json"  # rcea.store's convention: a part is complete once its manifest exists


def _parts(root: Path, name: str) -> tuple[list[Path], int]:
    """Parquet files of table ``name`` (DIR/name.parquet, or DIR/name/*.parquet without dot-files),
    keeping only parts with a manifest (docs/schema.md: a part without one is incomplete); also the number
    of parts left out."""
    single = root / f"{name}.parquet"
    if single.is_file():
        return [single], 0
    folder = root / name
    if not folder.is_dir():
        return [], 0
    parts = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith((".", "_")))
    done = [p for p in parts if p.with_name(p.name + MANIFEST_SUFFIX).exists()]
    return done, len(parts) - len(done)


def _read_part(name: str, part: Path) -> pa.Table:
    """One part's schema columns (ValueError / OSError / ArrowException when unusable)."""
    import pyarrow.parquet as pq

    schema_cols = list(TABLES[name])
    check_types(name, pq.read_schema(part))
    return pq.read_table(part, columns=schema_cols, read_dictionary=[c for c in STRING_KEYS if c in schema_cols])


def load_dataset(root: str | Path, names: tuple[str, ...] = tuple(TABLES), skip_bad_parts: bool = False) -> Dataset:
    """Read every schema table present under ``root``; missing tables become notes.

    Unreadable parts or parts lacking a required column raise ``BadParts`` (all of them, every table
    checked first) unless ``skip_bad_parts``, which leaves them out and lists them in ``skipped``.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"input directory {root} does not exist")
    ds = Dataset()
    for name in names:
        parts, incomplete = _parts(root, name)
        if incomplete and not parts:
            ds.notes.append(f"table '{name}': none of its {incomplete} part(s) has a manifest (incomplete): "
                            f"rerun the step that writes them, or mark each complete part with "
                            f"<part>.parquet{MANIFEST_SUFFIX} (docs/schema.md)")
            continue
        if not parts:
            ds.notes.append(f"table '{name}' not found (looked for {name}.parquet and {name}/*.parquet)")
            continue
        if incomplete:
            ds.notes.append(f"table '{name}': {incomplete} part(s) without a manifest (incomplete) ignored")
        pieces = []
        for part in parts:
            try:
                pieces.append(_read_part(name, part))
                ds.parts.append(part)
            except (ValueError, OSError, pa.ArrowException) as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                ds.skipped.append({"table": name, "file": str(part), "reason": reason})
        if len(pieces) < len(parts):
            bad = len(parts) - len(pieces)
            ds.notes.append(f"table '{name}': {bad} of {len(parts)} part(s) unusable and skipped: "
                            + "; ".join(f"{b['file']}: {b['reason']}" for b in ds.skipped if b["table"] == name))
        if not pieces:
            continue
        try:
            table = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces, promote_options="permissive")
        except (ValueError, pa.ArrowException) as exc:
            ds.notes.append(f"table '{name}' is unusable: its parts do not combine ({exc})")
            continue
        ds.tables[name] = table
    if ds.skipped and not skip_bad_parts:
        raise BadParts(ds.skipped)
    return ds


def from_tables(tables: dict[str, pa.Table]) -> Dataset:
    """Dataset from in-memory tables (benchmark, tests); checks columns the same way."""
    ds = Dataset()
    for name in TABLES:
        if name not in tables:
            ds.notes.append(f"table '{name}' not provided")
            continue
        try:
            check_types(name, tables[name].schema)
        except ValueError as exc:
            ds.notes.append(str(exc))
            continue
        ds.tables[name] = tables[name]
    return ds


def string_codes(col: pa.ChunkedArray | pa.Array, vocab: dict[str, int] | None = None) -> tuple[np.ndarray, list[str]]:
    """Integer codes (int64, N) of a string or dictionary column and its vocabulary (code -> value).

    With ``vocab`` given, values outside it get code -1 and the vocabulary is not extended.
    Null keys raise ValueError.
    """
    import pyarrow.compute as pc

    if col.null_count:
        raise ValueError("key column contains nulls")
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    fixed = vocab is not None
    vocab = dict(vocab) if vocab is not None else {}
    parts = []
    for ch in chunks:
        if not pa.types.is_dictionary(ch.type):
            ch = pc.dictionary_encode(ch)
        values = ch.dictionary.to_pylist()
        lut = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            v = str(v)
            if v not in vocab:
                if fixed:
                    lut[i] = -1
                    continue
                vocab[v] = len(vocab)
            lut[i] = vocab[v]
        idx = ch.indices.to_numpy(zero_copy_only=False)
        parts.append(lut[idx] if len(lut) else np.full(len(idx), -1, dtype=np.int64))
    codes = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    inv = [""] * len(vocab)
    for k, v in vocab.items():
        inv[v] = k
    return codes, inv


def numeric(col: pa.ChunkedArray | pa.Array, dtype=np.float64) -> np.ndarray:
    """A numeric/bool column as a numpy array (nulls -> NaN for floats; error for ints)."""
    if col.null_count:
        if np.dtype(dtype).kind != "f":
            raise ValueError("non-nullable numeric column contains nulls")
        col = col.cast(pa.float64())
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)
    if isinstance(col, pa.ChunkedArray) and col.num_chunks == 1:
        col = col.chunk(0)
    return np.asarray(col.to_numpy(zero_copy_only=False) if isinstance(col, pa.Array) else col.to_numpy(), dtype=dtype)


def group_keys(table: pa.Table, cols: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Group id per row (0..G-1, groups sorted by the key columns) and each group's key values."""
    codes, uniq = [], []
    for c in cols:
        col = table.column(c)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_dictionary(col.type):
            k, vocab = string_codes(col)
            order = np.argsort(np.array(vocab, dtype=object)) if vocab else np.empty(0, dtype=np.int64)
            rank = np.empty(len(vocab), dtype=np.int64)
            rank[order] = np.arange(len(vocab))
            codes.append(rank[k] if k.size else k)
            uniq.append(np.array(vocab, dtype=object)[order])
        else:
            vals, k = np.unique(numeric(col, np.int64), return_inverse=True)
            codes.append(k.ravel())
            uniq.append(vals)
    n = table.num_rows
    key = np.zeros(n, dtype=np.int64)
    for k, u in zip(codes, uniq):
        key = key * max(len(u), 1) + k
    ukey, gid = np.unique(key, return_inverse=True)
    out: dict[str, np.ndarray] = {}
    rem = ukey.copy()
    for c, u in reversed(list(zip(cols, uniq))):
        base = max(len(u), 1)
        out[c] = u[rem % base] if len(u) else np.empty(0)
        rem //= base
    return gid.ravel(), {c: out[c] for c in cols}
