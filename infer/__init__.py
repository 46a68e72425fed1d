"""The inference role: checkpoints in, RCEA sample-schema tables out (see docs/schema.md).

`python -m infer enqueue|worker|status`; backends in `infer.backends`; jobs in `infer.jobs`.
"""
