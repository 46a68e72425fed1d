"""CPU-only aggregation role: RCEA sample tables -> every quantity, table and figure of the paper.

Entry point: ``python -m aggregate --input DIR --output DIR`` (see ``aggregate.cli``).
Estimators live in small numpy modules (``entropy``, ``bootstrap``, ``modes``, ``covariance``,
``evals``); ``pipeline`` applies them to the schema tables (``rcea.schema``); ``tables``,
``figures`` and ``report`` render the outputs. Nothing here imports torch (a test enforces it).
"""
