"""Invoke's "No idea what '--methd' is!" answered with the valid choices and the closest one.

Every Invoke entry the project has (the tools environment's `invoke`, `scripts/run`) loads tasks.py before it parses
a task's flags; tasks.py imports this module, whose `install()` (run on import) wraps the parsing steps of Invoke's `Program` so that a parse error
for an unknown token says, in one line, what was valid there:

    invoke train: no option '--methd'; did you mean --method? Its options: --max-steps, --method, --override,
    --resume, --scale (invoke --help train)
    invoke: no task 'tarin'; did you mean train? Tasks: aggregate, audit, ... (invoke --list)

Other parse errors (a flag without its value, ...) keep Invoke's own message. The exit status stays Invoke's (1).
"""
from __future__ import annotations

import difflib
import re

from invoke.exceptions import ParseError
from invoke.program import Program

UNKNOWN = re.compile(r"No idea what '(.*)' is!")
NO_VALUE = re.compile(r"Flag <Argument: (\w+)\b.*needed value")


def _closest(token: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(token, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else "."


def explain(message: str, context, tasks: list[str]) -> str:
    """The message for a parse error: `context` is the parser context it happened in (a task's, named; or the
    core one, unnamed), `tasks` the collection's task names. Messages other than an unknown token pass through."""
    name = getattr(context, "name", None)
    flags = sorted(f for f in getattr(context, "flags", {}) if f.startswith("--"))
    options = f" Its options: {', '.join(flags) or 'none'} (invoke --help {name})" if name else ""
    valueless = NO_VALUE.match(message)
    if valueless:
        return f"invoke{f' {name}' if name else ''}: --{valueless.group(1).replace('_', '-')} needs a value.{options}"
    m = UNKNOWN.fullmatch(message)
    if not m:
        return message
    token = m.group(1)
    if name and token.startswith("-"):
        return f"invoke {name}: no option {token!r}{_closest(token, flags)}{options}"
    if token.startswith("-"):
        return f"invoke: no option {token!r}{_closest(token, flags)} (invoke --help; a task's own: invoke --help TASK)"
    if name:
        return f"invoke {name}: {token!r} is neither the value of one of its options nor a task{_closest(token, tasks)}" \
               f"{options}"
    return f"invoke: no task {token!r}{_closest(token, tasks)} Tasks: {', '.join(tasks)} (invoke --list)"


def _wrap(step):
    def wrapped(self, *args, **kwargs):
        try:
            return step(self, *args, **kwargs)
        except ParseError as exc:
            tasks = sorted(self.collection.task_names) if getattr(self, "collection", None) is not None else []
            raise ParseError(explain(str(exc), exc.context, tasks), exc.context) from None

    wrapped.rcea_explained = True
    return wrapped


def install() -> None:
    """Wrap Program.parse_tasks (a task's flags) and parse_cleanup (`invoke --help TASK`) once per process."""
    for attr in ("parse_tasks", "parse_cleanup"):
        step = getattr(Program, attr)
        if not getattr(step, "rcea_explained", False):
            setattr(Program, attr, _wrap(step))


install()   # on import: tasks.py imports this module, before Invoke parses any task's flags
