"""The RCEA sample schema: the tables the inference role writes and the aggregation role reads.

Any outside RLVR run can produce these tables (Parquet, one file per table or a folder of parts) and
feed them to `python -m aggregate`. Units: log-probabilities and entropies in nats. `method` is
`base` for the untrained policy; `step` is the optimizer step of the checkpoint (0 for base).

The tables are the contract between the roles (and with any outside run), so they live here; which
measurement job kind writes which table, and how, is the inference role's knowledge (infer/kinds/).
"""

from __future__ import annotations

SCHEMA_VERSION = "1.0"

# column -> logical type ("str", "int", "float", "bool"); a trailing "?" marks a nullable column.
TABLES: dict[str, dict[str, str]] = {
    "samples": {
        "scale": "str", "method": "str", "step": "int", "question_id": "str", "benchmark": "str",
        "sample": "int", "reward": "int", "n_tokens": "int", "logprob_sum": "float",
        "token_entropy_mean": "float", "truncated": "bool", "process_valid": "bool?", "mode": "str?",
    },
    "tokens": {
        "scale": "str", "method": "str", "step": "int", "question_id": "str", "sample": "int",
        "position": "int", "token_id": "int", "logprob": "float", "entropy": "float",
    },
    "covariance": {
        "scale": "str", "method": "str", "step_from": "int", "step_to": "int",
        "predicted_delta": "float", "observed_delta": "float",
    },
    "greedy": {
        "scale": "str", "method": "str", "step": "int", "benchmark": "str", "question_id": "str",
        "correct": "bool", "boxed": "bool", "n_tokens": "int",
    },
    "passk": {"scale": "str", "method": "str", "step": "int", "question_id": "str", "n": "int", "c": "int"},
}


def check_columns(table: str, columns) -> None:
    """Raise ValueError naming the missing columns of `table` (extra columns are allowed)."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; the schema has {sorted(TABLES)}")
    missing = [c for c in TABLES[table] if c not in set(columns)]
    if missing:
        raise ValueError(f"table {table!r} lacks columns {missing} (schema {SCHEMA_VERSION})")


def _type_fits(logical: str, arrow_type) -> bool:
    import pyarrow as pa

    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    if logical.endswith("?") and pa.types.is_null(t):
        return True  # a nullable column that is null throughout (e.g. process_valid before judging)
    return {"str": lambda: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
            "int": lambda: pa.types.is_integer(t),
            "float": lambda: pa.types.is_floating(t),
            "bool": lambda: pa.types.is_boolean(t)}[logical.rstrip("?")]()


def check_types(table: str, arrow_schema) -> None:
    """Raise ValueError naming each required column of `table` whose Arrow type is not the schema's logical
    type (checked, never coerced: reward stored as text is refused, not read as missing values)."""
    check_columns(table, arrow_schema.names)
    wrong = [f"{col} is {arrow_schema.field(col).type}, expected {logical.rstrip('?')}"
             for col, logical in TABLES[table].items() if not _type_fits(logical, arrow_schema.field(col).type)]
    if wrong:
        raise ValueError(f"table {table!r}: column " + "; column ".join(wrong) + f" (schema {SCHEMA_VERSION})")
