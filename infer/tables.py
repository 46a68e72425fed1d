"""Writing RCEA sample-schema tables: typed frames, one Parquet part per job, atomic with a manifest."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rcea.schema import SCHEMA_VERSION, TABLES, check_columns
from rcea.layout import table_part
from rcea.store import atomic_write_bytes, manifest_path, write_manifest

PANDAS_TYPES = {"str": "object", "int": "int64", "float": "float64", "bool": "bool",
                "str?": "string", "bool?": "boolean"}


def part_path(scale: str, table: str, part: str) -> Path:
    return table_part(scale, table, part)   # the path a finished job is checked by (rcea.store.job_complete)


def frame(table: str, rows: list[dict] | dict[str, list]) -> pd.DataFrame:
    """A DataFrame (from row dicts or column lists) with the schema's columns first, typed; extras follow."""
    cols = TABLES[table]
    df = pd.DataFrame(rows)
    for col, kind in cols.items():
        if col not in df.columns:
            if not kind.endswith("?"):
                raise ValueError(f"{table}: rows lack the required column {col!r}")
            df[col] = None
    if df.empty:
        df = pd.DataFrame({c: pd.Series(dtype=PANDAS_TYPES[k]) for c, k in cols.items()})
    df = df[list(cols) + [c for c in df.columns if c not in cols]]
    check_columns(table, df.columns)
    return df.astype({c: PANDAS_TYPES[k] for c, k in cols.items()})


def clear_stale(path: Path) -> None:
    """Remove temporary files a killed writer left beside `path` (`.<name>.*.tmp`)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp") if path.parent.exists() else []:
        tmp.unlink(missing_ok=True)


def write_parts(scale: str, part: str, frames: dict[str, pd.DataFrame], cfg, seeds: dict, **extra) -> list[Path]:
    """Write every table's part atomically, then every manifest (readers use only parts with a manifest).

    All rows are computed before; the Parquet files (slow) go first and the manifests (fast) last, so
    the window in which one table of a job is visible without the others is a few milliseconds.
    """
    import io

    paths = []
    for table, df in frames.items():
        path = part_path(scale, table, part)
        manifest_path(path).unlink(missing_ok=True)
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    for (table, df), path in zip(frames.items(), paths):
        write_manifest(path, cfg=cfg, seeds=seeds, rows=int(len(df)), schema_version=SCHEMA_VERSION, table=table,
                       **extra)
    return paths


def greedy_summary(location) -> pd.DataFrame:
    """Per checkpoint and benchmark: accuracy, boxed-answer rate, mean length (tokens), questions."""
    from rcea.store import read_table

    df = read_table(location)
    g = df.groupby(["method", "step", "benchmark"], as_index=False)
    return g.agg(accuracy=("correct", "mean"), boxed_rate=("boxed", "mean"), mean_tokens=("n_tokens", "mean"),
                 questions=("question_id", "count")).sort_values(["method", "step", "benchmark"])
