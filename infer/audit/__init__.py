"""Independent partition audit of the frozen semantic modes (paper supplement §12; docs/estimators.md#partition-audit).

    python -m infer.audit sample --scale S [--questions 29] [--per-question 18] [--exclude dev_ids.txt] [--if-missing]
    python -m infer.audit import FILE --scale S   (CSV: annotator,pair_id,label[,kind]; label
                                                  same|different or 0|1, kind label|adjudication)
    python -m infer.audit serve  --scale S [--port 8765]      (the page: choose the annotator; what to do if empty)
    python -m infer.audit report --scale S [--out report.json]

Pairs, raw labels and adjudications live in one SQLite file on the shared volume
(`data/infer/<scale>/semantic/audit/audit.sqlite`); adjudications are stored apart from raw labels.
"""
