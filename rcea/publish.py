"""`python -m rcea.publish SRC DEST`: copy a study's results folder to where the user reads it.

Used by `invoke study` as its last stage: data/results/<scale> -> results/<scale> (at 3b/7b inside the
aggregate container, from the named data volume to the bind-mounted ./results of the host). The copy is
built beside DEST and renamed into place, so DEST is either the previous copy or the complete new one;
temporary files a killed writer left in SRC are not copied. A target that cannot be written (read-only,
full, owned by another user) ends in one line naming the folder and the fix; nothing is left beside DEST
(no `<name>.incoming`), and DEST keeps the previous copy.
Standard library only.
"""
from __future__ import annotations

import argparse
import errno
import os
import shutil
import sys
from pathlib import Path


class PublishError(OSError):
    """The published copy could not be written; the message is one line with the fix."""


def _undo(tmp: Path, dest: Path, old: Path) -> None:
    """After a failure: DEST back to the previous copy if it was moved aside, and the partial copy removed."""
    if old.exists() and not dest.exists():
        try:
            old.rename(dest)
        except OSError:
            pass
    shutil.rmtree(tmp, ignore_errors=True)


def publish(src: Path, dest: Path) -> int:
    """Replace DEST by a copy of SRC; returns the number of files copied (PublishError when DEST cannot be written)."""
    if not (src / "report.md").is_file():
        raise FileNotFoundError(f"{src} holds no report.md; run the aggregation first (invoke aggregate)")
    tmp, old = dest.with_name(dest.name + ".incoming"), dest.with_name(dest.name + ".previous")
    from rcea.store import is_temp   # never a writer's temporary file left by a killed aggregation

    first: list[OSError] = []   # copytree gathers its files' errors into one shutil.Error: keep the first

    def copy(s, d):
        try:
            return shutil.copy2(s, d)
        except OSError as exc:
            first.append(exc)
            raise

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        folders = [dest.parent, *([dest, *(p for p in dest.rglob("*") if p.is_dir())] if dest.is_dir() else [])]
        for folder in folders:   # a read-only copy is refused before anything changes (os.access: root may write)
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied", str(folder))
        for stale in (tmp, old):
            if stale.exists():
                shutil.rmtree(stale)
        shutil.copytree(src, tmp, ignore=lambda _, names: [n for n in names if is_temp(n)], copy_function=copy)
        if dest.exists():
            dest.rename(old)
        tmp.rename(dest)
    except OSError as exc:
        _undo(tmp, dest, old)
        exc = first[0] if isinstance(exc, shutil.Error) and first else exc
        fix = ("free space on that disk" if exc.errno == errno.ENOSPC else
               f"make {dest.parent} and everything in {dest} writable by this user (`chmod -R u+w {dest.parent}`)")
        raise PublishError(f"cannot write the published copy {dest} ({exc.strerror or exc}: {exc.filename or dest}); "
                           f"{fix}, then rerun; the complete results stay in {src}") from None
    shutil.rmtree(old, ignore_errors=True)   # a leftover is removed by the next publish (or named by it)
    return sum(1 for p in dest.rglob("*") if p.is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rcea.publish", description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    try:
        n = publish(args.src, args.dest)
    except (FileNotFoundError, PublishError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[results] {n} files: {args.src} -> {args.dest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
