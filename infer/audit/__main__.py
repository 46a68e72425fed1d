"""CLI of the partition audit; see infer/audit/__init__.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infer.audit.sample import drawn, import_labels, report, sample
from infer.audit.server import make_server
from rcea.layout import audit_db, audit_report
from rcea.store import atomic_write_json


def _nothing_to_report(scale: str) -> str:
    """'' when the audit has annotations to report on, else what to do first (one line)."""
    from infer.audit import store

    db = audit_db(scale)
    if not db.exists() or not drawn(db):
        return (f"audit: no audit sample at {db} yet; draw it with `invoke audit --scale {scale} --sample` "
                "(the study does), annotate it, then --report")
    with store.connect(db) as con:
        n = sum(con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("labels", "adjudications"))
    if n:
        return ""
    return (f"audit: no annotations in {db} yet; annotate the pairs with `invoke audit --scale {scale} --serve` "
            f"(or import a CSV with `invoke audit --scale {scale} --import FILE`), then --report")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infer.audit")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="draw question-disjoint within-question pairs (seed 2031)")
    s.add_argument("--scale", required=True)
    s.add_argument("--questions", type=int, default=None, help="default: audit.n_questions (29)")
    s.add_argument("--per-question", type=int, default=None, help="default: audit.per_question (18)")
    s.add_argument("--exclude", type=Path, default=None, help="file of development question ids, one a line")
    s.add_argument("--annotators", default="A,B")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--force", action="store_true", help="redraw even if pairs (and labels) exist")
    s.add_argument("--if-missing", action="store_true", help="keep an existing draw (exit 0): what a study rerun does")
    m = sub.add_parser("import", help="import annotations: CSV with the header annotator,pair_id,label[,kind]; "
                       "label same|different (or 0|1), kind label|adjudication")
    m.add_argument("file", type=Path)
    m.add_argument("--scale", required=True)
    v = sub.add_parser("serve", help="serve the annotation page")
    v.add_argument("--scale", required=True)
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--port", type=int, default=8765)
    r = sub.add_parser("report", help="agreement metrics and the five gates")
    r.add_argument("--scale", required=True)
    r.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "sample" and args.if_missing and not args.force and drawn(audit_db(args.scale)):
        print(f"[audit] sample kept: {drawn(audit_db(args.scale))} pairs drawn before ({audit_db(args.scale)})")
    elif args.cmd == "import":
        try:
            print(json.dumps(import_labels(audit_db(args.scale), args.file), indent=2))
        except (ValueError, KeyError) as exc:
            print(f"error: {args.file}: {exc}; nothing was imported", file=sys.stderr)
            return 2
    elif args.cmd == "sample":
        exclude = set(args.exclude.read_text().split()) if args.exclude else set()
        names = tuple(args.annotators.split(","))
        if len(names) != 2:
            raise SystemExit("--annotators needs two names, e.g. A,B")
        out = sample(args.scale, args.seed or None, args.questions, args.per_question,
                     exclude, names, args.force)
        print(f"[audit] {out['pairs']} pairs drawn from {out['trajectories']} trajectories of {out['questions']} "
              f"questions ({out['db']}); annotate them with `invoke audit --scale {args.scale} --serve`")
    elif args.cmd == "serve":
        db = audit_db(args.scale)
        empty = (f"no audit pairs in {db} yet: draw them first with `invoke audit --scale {args.scale} --sample` "
                 "(a study draws them), then reload the page")
        try:
            httpd = make_server(db, args.host, args.port, empty_hint=empty)
        except OSError as exc:   # the port is taken (or not ours to bind)
            print(f"error: cannot serve the audit page on {args.host}:{args.port} ({exc.strerror or exc}); "
                  f"choose another port with --port N", file=sys.stderr)
            return 2
        host, port = httpd.server_address[:2]
        print(f"audit page: http://{host}:{port}/?annotator=A  (choose the annotator on the page; "
              "adjudication: ?annotator=C&adjudicate=1)", flush=True)
        if not drawn(db):
            print(f"audit page: {empty}", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
    else:
        hint = _nothing_to_report(args.scale)
        if hint:
            print(hint, file=sys.stderr)
            return 1
        out = report(audit_db(args.scale))
        atomic_write_json(args.out or audit_report(args.scale), out)
        print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
