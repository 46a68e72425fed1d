"""Answer forms the verifier rewrites before comparing: pure string code, called by `rcea.verify_normalize`.

Each rewrite turns one way of writing a value into the plain form math-verify understands:
repeating decimals (`0.\\overline{3}`, `0.1\\dot{6}`, `0.(3)`) become exact fractions; the empty set
in any spelling (`\\varnothing`, `\\{\\}`) becomes `\\emptyset`; number words (`2 million`,
`\\text{twenty-one}`) become digits; redundant parentheses around a whole tuple (`((1,2))`) go;
`+-` becomes `\\pm`, and `\\pm` answers get a variant listing both values (`2\\pm\\sqrt3` ->
`2+\\sqrt3, 2-\\sqrt3`). Only regular expressions and integer/decimal arithmetic on digit strings:
nothing here evaluates model output, and every number is bounded in length.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

__all__ = ["repeating_decimals", "empty_set", "number_words", "strip_redundant_parens", "plus_minus_sign",
           "expand_plus_minus"]

_MAX_DIGITS = 60  # longer digit strings are left as they are

# ---------------------------------------------------------------------------------------------
# repeating decimals

_REP_MARK = r"\\(?:overline|bar|dot|overset\s*\{\s*\.\s*\})\s*"
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)" + _REP_MARK + r"(?:\{\s*(\d+)\s*\}|(\d))")
# `0.\dot{1}4\dot{2}` (British dots over the first and last digit of the period)
_DOTS_PERIOD = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\dot\s*\{(\d)\}(\d*)\\dot\s*\{(\d)\}")
_PAREN_PERIOD = re.compile(r"^([-+]?)(\d*)\.(\d*)\((\d+)\)$")  # `0.(3)`, whole answer only


def _fraction_latex(whole: str, fixed: str, period: str) -> str | None:
    """`whole.fixed(period)(period)...` as `\\frac{p}{q}` (or an integer), or None if too long."""
    if len(whole) + len(fixed) + len(period) > _MAX_DIGITS or not period:
        return None
    k, m = len(fixed), len(period)
    value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10**k) \
        + Fraction(int(period), 10**k * (10**m - 1))
    if value.denominator == 1:
        return str(value.numerator)
    return rf"\frac{{{value.numerator}}}{{{value.denominator}}}"


def repeating_decimals(s: str) -> str:
    """`0.\\overline{3}` -> `\\frac{1}{3}`, `0.8\\overline{3}` -> `\\frac{5}{6}`, `0.\\overline{9}` -> `1`."""
    def dots(m: re.Match[str]) -> str:
        return _fraction_latex(m.group(1), m.group(2), m.group(3) + m.group(4) + m.group(5)) or m.group(0)

    def mark(m: re.Match[str]) -> str:
        return _fraction_latex(m.group(1), m.group(2), m.group(3) or m.group(4)) or m.group(0)

    s = _DOTS_PERIOD.sub(dots, s)
    s = _REPEATING.sub(mark, s)
    m = _PAREN_PERIOD.match(s.strip())
    if m:
        frac = _fraction_latex(m.group(2), m.group(3), m.group(4))
        if frac is not None:
            s = ("-" if m.group(1) == "-" else "") + frac
    return s


# ---------------------------------------------------------------------------------------------
# the empty set

def empty_set(s: str) -> str:
    """`\\varnothing`, `\\{\\}`, `\\{ \\}` -> `\\emptyset` (`\\{\\emptyset\\}` stays a one-element set)."""
    s = re.sub(r"\\(?:varnothing|emptyset)(?![A-Za-z])\s*", r"\\emptyset ", s)
    return re.sub(r"\\\{\s*\\\}", r"\\emptyset ", s)


# ---------------------------------------------------------------------------------------------
# number words

_ONES = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_SCALE_WORD = r"(thousand|million|billion|trillion)s?"
_TEXT_OPEN = r"\\(?:text|textrm|textnormal|mbox|mathrm)\s*\{\s*"
# `2 million`, `1.5\text{ million}`, `2 \text{ millions of dollars}` (the rest of the text is kept)
_DIGITS_SCALE = re.compile(r"(?<![\d.,])(\d{1,15}(?:\.\d{1,15})?)\s*(?:" + _TEXT_OPEN + _SCALE_WORD
                           + r"(?![A-Za-z])([^{}]*)\}|" + _SCALE_WORD + r"(?![A-Za-z]))")


def _scaled(number: str, word: str) -> str:
    try:
        value = Decimal(number) * _SCALES[word]
    except InvalidOperation:
        return number
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _words_value(text: str) -> int | None:
    """`twenty-one` -> 21, `one hundred and five` -> 105, `a million` -> 1000000; None unless all number words."""
    tokens = [t for t in re.split(r"[\s\-]+", text.lower().strip()) if t]
    sign = 1
    if tokens and tokens[0] in ("negative", "minus"):
        sign, tokens = -1, tokens[1:]
    if not tokens or all(t in ("a", "and") for t in tokens):
        return None
    total = current = 0
    last = None  # kind of the previous token, to refuse `five five` or `twenty twenty`
    for i, t in enumerate(tokens):
        if t == "and" and last in ("hundred", "scale"):
            continue
        if t == "a" and i == 0 and len(tokens) > 1 and (tokens[1] == "hundred" or tokens[1] in _SCALES):
            current, last = 1, "ones"
            continue
        if t in _ONES and last in (None, "tens", "hundred", "scale"):
            if last == "tens" and (_ONES[t] == 0 or _ONES[t] > 9):
                return None
            current, last = current + _ONES[t], "ones"
        elif t in _TENS and last in (None, "hundred", "scale"):
            current, last = current + _TENS[t], "tens"
        elif t == "hundred" and last in ("ones",) and 0 < current < 10:
            current, last = current * 100, "hundred"
        elif t in _SCALES and last in ("ones", "tens", "hundred"):
            total, current, last = total + current * _SCALES[t], 0, "scale"
        else:
            return None
    return sign * (total + current)


def number_words(s: str) -> str:
    """`2 million` -> `2000000`; a whole answer in number words (`twenty-one`) -> `21`."""
    def digits_scale(m: re.Match[str]) -> str:
        if m.group(2):
            rest = m.group(3).strip()
            return _scaled(m.group(1), m.group(2)) + (rf" \text{{{rest}}}" if rest else "")
        return _scaled(m.group(1), m.group(4))

    s = _DIGITS_SCALE.sub(digits_scale, s)
    if re.fullmatch(r"[A-Za-z\s\-]+", s) and len(s) < 200:
        value = _words_value(s)
        if value is not None:
            return str(value)
    return s


# ---------------------------------------------------------------------------------------------
# parentheses and plus-minus

def _closing(s: str, start: int) -> int | None:
    """Index of the bracket closing the `(` or `[` at `start` (escaped characters skipped)."""
    depth = 0
    i = start
    while i < len(s):
        ch = s[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def strip_redundant_parens(s: str) -> str:
    """`((1,2))` -> `(1,2)`, `( (2,-1) )` -> `(2,-1)`; `((1,2),3)` and `((1,2),(3,4))` stay."""
    for _ in range(8):
        t = s.strip()
        if not (t.startswith("(") and t.endswith(")") and _closing(t, 0) == len(t) - 1):
            break
        inner = t[1:-1].strip()
        if not (inner[:1] in "([" and inner and _closing(inner, 0) == len(inner) - 1):
            break
        s = inner
    return s


def plus_minus_sign(s: str) -> str:
    """ASCII `+-` and `+/-` -> `\\pm`."""
    return re.sub(r"\+\s*(?:/\s*)?-\s*", r"\\pm ", s)


_PM = re.compile(r"\\(?:pm|mp)(?![A-Za-z])")


def expand_plus_minus(s: str) -> str | None:
    """One `\\pm`/`\\mp` in a single answer -> both values as a list (`\\pm 3` -> `+ 3, - 3`), else None."""
    if len(_PM.findall(s)) != 1 or "=" in s or re.search(r"\\le|\\ge|[<>]", s):
        return None
    depth = 0
    for ch in s:  # a top-level comma means a list already: leave it
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            return None
    return f"{_PM.sub('+', s)}, {_PM.sub('-', s)}"
