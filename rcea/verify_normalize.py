"""String-level helpers of the verifier: boxed-answer extraction and answer normalisation.

Pure string code (regular expressions only): nothing here parses or evaluates model output, so it is
safe to call on any text and cheap enough to run in the caller's process. The symbolic comparison
lives in `rcea.verify_sandbox`, behind a time limit.

`normalize_answer` rewrites an answer into plain LaTeX that math-verify understands, covering what
math-verify 0.9.0 misses: unicode math, `\\dfrac`/`\\tfrac`, `\\left`/`\\right`, spacing macros,
thousands separators, trailing punctuation, degree signs, `\\text{...}` units, dollar signs,
scientific `e` notation. Percent signs and `x = ...` assignments are handled as answer *variants*
(`answer_variants`) because whether to drop them depends on the reference.
"""

from __future__ import annotations

import re

from rcea.verify_forms import empty_set, expand_plus_minus, number_words, plus_minus_sign, repeating_decimals, strip_redundant_parens

__all__ = [
    "extract_boxed",
    "normalize_answer",
    "answer_variants",
    "canonical_string",
    "has_percent",
    "strip_percent",
    "strip_assignments",
]

# ---------------------------------------------------------------------------------------------
# extraction

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_SPACE_FORM_TRAIL = "$.,;:!?)]}"  # punctuation that ends a sentence after `\boxed 5`


def _match_brace(text: str, start: int) -> int | None:
    """Index of the `}` closing the `{` at `start`, or None when unbalanced.

    Escaped braces (`\\{`, `\\}`) and other backslash pairs are skipped, so `\\boxed{\\{1,2\\}}` works.
    """
    depth = 0
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the LAST `\\boxed{...}` / `\\fbox{...}` / `\\boxed 5` in `text`, else None.

    Nested braces are matched. An unclosed last box (e.g. a truncated completion) gives None; so
    does text with no box at all: an unboxed answer is never extracted. Never raises for a str.
    """
    if not isinstance(text, str):
        return None
    matches = list(_BOX_CMD.finditer(text))
    if not matches:
        return None
    end = matches[-1].end()
    i = end
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        close = _match_brace(text, i)
        if close is None:
            return None
        return text[i + 1 : close].strip()
    # space form `\boxed 42` (LaTeX boxes one token; models mean the whole number)
    m = re.match(r"[^\s]+", text[i:])
    if m is None or (i == end and m.group(0)[0].isalpha()):
        return None
    token = m.group(0)
    while token and token[-1] in _SPACE_FORM_TRAIL:
        token = token[:-1]
    # `\boxed 5\]` or `\boxed 5\)`: drop a closing display delimiter
    token = re.sub(r"\\[\])]$", "", token)
    return token or None


# ---------------------------------------------------------------------------------------------
# unicode

_UNICODE_SIMPLE = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\ufe63": "-", "\uff0d": "-",
    "\u00d7": r" \times ", "\u22c5": r" \cdot ", "\u00b7": r" \cdot ", "\u2219": r" \cdot ",
    "\u00f7": r" \div ", "\u2264": r" \le ", "\u2a7d": r" \le ", "\u2265": r" \ge ", "\u2a7e": r" \ge ",
    "\u2260": r" \ne ", "\u221e": r"\infty ", "\u00b1": r" \pm ", "\u2213": r" \mp ",
    "\u222a": r" \cup ", "\u2229": r" \cap ", "\u2208": r" \in ", "\u2205": r"\emptyset ",
    "\u03c0": r"\pi ", "\u03b8": r"\theta ", "\u03b1": r"\alpha ", "\u03b2": r"\beta ",
    "\u03b3": r"\gamma ", "\u03bb": r"\lambda ", "\u03bc": r"\mu ", "\u03c6": r"\phi ",
    "\u03c9": r"\omega ", "\u0394": r"\Delta ", "\u2248": r" \approx ",
    "\u00b0": r"^\circ ", "\u2103": r"^\circ ", "\u2032": "'",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2002": " ", "\u2003": " ", "\u200b": "",
    "\u2044": "/", "\u2215": "/",
}
_VULGAR = {
    "\u00bd": (1, 2), "\u2153": (1, 3), "\u2154": (2, 3), "\u00bc": (1, 4), "\u00be": (3, 4),
    "\u2155": (1, 5), "\u2156": (2, 5), "\u2157": (3, 5), "\u2158": (4, 5), "\u2159": (1, 6),
    "\u215a": (5, 6), "\u2150": (1, 7), "\u215b": (1, 8), "\u215c": (3, 8), "\u215d": (5, 8),
    "\u215e": (7, 8), "\u2151": (1, 9), "\u2152": (1, 10),
}
_SUPERSCRIPTS = dict(zip("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207b\u207a\u207f",
                         "0123456789-+n"))
_SUBSCRIPTS = dict(zip("\u2080\u2081\u2082\u2083\u2084\u2085\u2086\u2087\u2088\u2089", "0123456789"))
_SUP_RUN = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+")
_SUB_RUN = re.compile("[" + "".join(_SUBSCRIPTS) + "]+")
_SQRT_UNICODE = re.compile(r"[\u221a\u221b]\s*(\{[^{}]*\}|\([^()]*\)|\\?[A-Za-z]+|\d+(?:\.\d+)?)")


def _unicode_to_latex(s: str) -> str:
    """Rewrite unicode math (−, ×, ½, π, √, ², ≤, °, …) as ASCII LaTeX."""
    for ch, (a, b) in _VULGAR.items():
        s = s.replace(ch, rf"\frac{{{a}}}{{{b}}}")
    s = _SUP_RUN.sub(lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group(0)) + "}", s)
    s = _SUB_RUN.sub(lambda m: "_{" + "".join(_SUBSCRIPTS[c] for c in m.group(0)) + "}", s)

    def _sqrt(m: re.Match[str]) -> str:
        arg = m.group(1)
        if arg[0] in "{(":
            arg = arg[1:-1]
        root = r"\sqrt[3]" if m.group(0)[0] == "\u221b" else r"\sqrt"
        return f"{root}{{{arg}}}"

    s = _SQRT_UNICODE.sub(_sqrt, s)
    for ch, rep in _UNICODE_SIMPLE.items():
        s = s.replace(ch, rep)
    return s


# ---------------------------------------------------------------------------------------------
# LaTeX clean-up

_UNIT_WORDS = (
    "cm|mm|km|m|meters?|metres?|centimeters?|kilometers?|inches|inch|in|feet|foot|ft|yards?|yd|miles?|mi|"
    "square|sq|cubic|units?|degrees?|deg|radians?|rad|dollars?|cents?|hours?|hrs?|h|minutes?|mins?|"
    "seconds?|secs?|s|days?|weeks?|months?|years?|grams?|g|kg|kilograms?|pounds?|lbs?|ounces?|oz|"
    "liters?|litres?|l|ml|gallons?|mph|kmh|people|students?|ways?|points?|marbles?|"
    "apples?|books?|pages?|coins?|cookies?|dogs?|cats?|eggs?|boxes|balls?|times|percent|"
    "sq\\.?\\s*units|J|kJ|eV|keV|MeV|N|Pa|K|W|Hz|V|A|C|mol|m/s|km/h"
)
_TEXT_CMD = r"\\(?:text|textrm|textnormal|mbox|mathrm|textup|textit|textbf|mathbf|operatorname|rm)"
_TRAILING_TEXT = re.compile(r"\s*" + _TEXT_CMD + r"\s*\{([^{}]*)\}\s*(?:\^\s*(?:\{[^{}]*\}|\d))?\s*$")
_TRAILING_UNIT_WORD = re.compile(r"(?<=[\d}])(?:\s|\\\s)+(?:" + _UNIT_WORDS + r")(?:\^\s*(?:\{\d\}|\d))?\s*$")
_ATTACHED_UNIT = re.compile(  # units written without a space: `5cm`, `12ft^2` (multi-letter, unambiguous)
    r"(?<=\d)(?:cm|mm|km|kg|ml|ft|mph|units?|inches|feet|meters|metres|hours|minutes|seconds|days|"
    r"dollars|cents|degrees)(?:\^\s*(?:\{\d\}|\d))?\s*$"
)
_TEXT_WRAPPER = re.compile(_TEXT_CMD + r"\s*\{([^{}]*)\}")
_CONNECTIVE = re.compile(r"\s*(?:" + _TEXT_CMD + r"\s*\{\s*(?:and|or|,)\s*\}|\\(?:quad|qquad)\s*(?:and|or)\s*(?:\\(?:quad|qquad))?|\s(?:and|or)\s)\s*")
_THOUSANDS = re.compile(r"^(-?)(\d{1,3}(?:,\d{3})+)(\.\d+)?$")
_SCI = re.compile(r"^([-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*[eE]\s*([-+]?\d+)$")
_LEADING_ZEROS = re.compile(r"^(-?)0+(\d)")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def _strip_math_delimiters(s: str) -> str:
    """Remove `$...$`, `\\(...\\)`, `\\[...\\]` around a whole answer."""
    changed = True
    while changed:
        changed = False
        t = s.strip()
        for left, right in (("$$", "$$"), ("$", "$"), (r"\(", r"\)"), (r"\[", r"\]")):
            if len(t) >= len(left) + len(right) and t.startswith(left) and t.endswith(right):
                t = t[len(left) : len(t) - len(right)].strip()
                changed = True
                break
        s = t
    return s


def _strip_trailing_units(s: str) -> str:
    """Drop trailing `\\text{ cm}`-style units and bare unit words after a number-like math part."""
    for _ in range(4):
        m = _TRAILING_TEXT.search(s)
        if m and re.search(r"[\d}\\]", s[: m.start()]) and s[: m.start()].strip():
            s = s[: m.start()].rstrip()
            continue
        m = _TRAILING_UNIT_WORD.search(s) or _ATTACHED_UNIT.search(s)
        if m and s[: m.start()].strip() and not re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", s[: m.start()])):
            s = s[: m.start()].rstrip()
            continue
        break
    return s


def normalize_answer(s: str) -> str:
    """Canonical LaTeX form of one answer string (prediction or reference).

    Idempotent on its own output. Keeps commas of tuples/intervals/lists, but removes thousands
    separators from a lone number (`1,000` -> `1000`). Does not remove `%` or `x =` (see
    `answer_variants`).
    """
    s = _unicode_to_latex(s)
    s = _strip_math_delimiters(s)
    # nested boxes inside a box
    for _ in range(3):
        inner = re.fullmatch(r"\\(?:boxed|fbox)\s*\{(.*)\}", s.strip(), flags=re.S)
        if not inner:
            break
        s = inner.group(1)
    s = re.sub(r"\\[dtc]frac(?![A-Za-z])", r"\\frac", s)
    s = re.sub(r"\\left\s*\.|\\right\s*\.", "", s)
    s = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg|bigl|bigr|Bigl|Bigr)(?![A-Za-z])", "", s)
    s = re.sub(r"\\displaystyle(?![A-Za-z])", "", s)
    s = re.sub(r"(\d)\\,(\d{3})(?!\d)", r"\1\2", s)  # 1\,000
    s = re.sub(r"(\d)\{,\}(\d{3})(?!\d)", r"\1,\2", s)  # 1{,}000
    s = re.sub(r"(\\\\)|\\[,;:!>](?![A-Za-z])|\\ |~", lambda m: m.group(1) or " ", s)
    s = re.sub(r"\\(?:quad|qquad)(?![A-Za-z])", " ", s)
    s = s.replace(r"\$", "").replace("$", "")
    s = re.sub(r"\\(?:dollars?|text\{\s*dollars?\s*\})", "", s)
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree(?![A-Za-z])", "", s)
    s = re.sub(r"\\(?:le|leq|leqslant)(?![A-Za-z])", r"\\le ", s)
    s = re.sub(r"\\(?:ge|geq|geqslant)(?![A-Za-z])", r"\\ge ", s)
    s = re.sub(r"\\(?:neq|ne)(?![A-Za-z])", r"\\ne ", s)
    s = number_words(repeating_decimals(empty_set(plus_minus_sign(s)))).strip()
    # trailing sentence punctuation inside the box ("5." "5," "\text{5.}")
    for _ in range(3):
        t = re.sub(r"(?:\\\.|[.,;:!])\s*$", "", s).strip()
        t = re.sub(r"(" + _TEXT_CMD + r"\s*\{[^{}]*?)[.,;:!]\s*\}\s*$", r"\1}", t).strip()
        if t == s:
            break
        s = t
    s = _strip_trailing_units(s)
    s = _CONNECTIVE.sub(", ", s)
    # unwrap \text{...} (text answers and leftovers); keep the content
    for _ in range(3):
        t = _TEXT_WRAPPER.sub(lambda m: m.group(1).strip(), s)
        if t == s:
            break
        s = t
    s = strip_redundant_parens(number_words(re.sub(r"\s+", " ", s).strip()))
    s = re.sub(r"\s*(?:degrees?|deg)$", "", s) if re.search(r"\d\s*(?:degrees?|deg)$", s) else s
    m = _THOUSANDS.match(s.replace(" ", ""))
    if m:
        s = m.group(1) + m.group(2).replace(",", "") + (m.group(3) or "")
    m = _SCI.match(s)
    if m:
        s = f"{m.group(1)}\\times 10^{{{int(m.group(2))}}}"
    if _NUMBER.match(s):
        s = _LEADING_ZEROS.sub(r"\1\2", s)
    return s


# ---------------------------------------------------------------------------------------------
# variants that depend on the reference

_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\{\s*percent\s*\}|\s?percent)\s*")
_SIMPLE_LHS = re.compile(r"^\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[\w\\]+\}?)?(?:\([A-Za-z]\))?'?\s*$")


def has_percent(s: str) -> bool:
    """True when `s` carries a percent sign."""
    return bool(_PERCENT.search(s))


def strip_percent(s: str) -> str:
    """Remove percent signs (`50\\%` -> `50`)."""
    return _PERCENT.sub("", s).strip()


def _split_top_level(s: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets and braces."""
    parts, depth, cur = [], 0, []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            cur.append(s[i : i + 2])
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def strip_assignments(s: str) -> str:
    """`x = 5` -> `5`; `x = 1, y = 2` -> `1, 2`; `a+b = 7` -> `7`; `x \\in [1,2]` -> `[1,2]`.

    Each comma-separated part of the form `<simple name> = <value>` loses its name; a single part
    with any left-hand side keeps the right-hand side of its last `=`.
    """
    s = re.sub(r"^\s*(?:[A-Za-z]|\\[A-Za-z]+)\s*\\in\s+", "", s)
    parts = _split_top_level(s)
    if len(parts) == 1:
        if "=" in s and not re.search(r"\\(?:le|ge|ne)\b|[<>]", s):
            return s.rsplit("=", 1)[1].strip()
        m = re.match(r"^(.*?)\\approx(.*)$", s)
        return m.group(2).strip() if m else s
    out = []
    for p in parts:
        if "=" in p and _SIMPLE_LHS.match(p.split("=", 1)[0]):
            p = p.split("=", 1)[1]
        out.append(p.strip())
    return ", ".join(out)


def _has_relation(s: str) -> bool:
    return "=" in s or "\\in " in s or "\\approx" in s


def answer_variants(pred: str, ref: str) -> tuple[list[str], list[str]]:
    """Normalised forms of the prediction and the reference to compare pairwise (any match wins).

    The first form of each list is the plain normalisation. Extra forms: without percent signs when
    either side has one; the prediction without `x =` when the reference has no relation; a `\\pm`
    answer as the list of its two values.
    """
    p0, r0 = normalize_answer(pred), normalize_answer(ref)
    preds, refs = [p0], [r0]
    if not _has_relation(r0) and _has_relation(p0):
        preds.append(strip_assignments(p0))
    if has_percent(p0) or has_percent(r0):
        preds += [strip_percent(p) for p in list(preds) if has_percent(p)]
        refs += [strip_percent(r) for r in list(refs) if has_percent(r)]
    preds += [e for e in map(expand_plus_minus, preds) if e]  # `2\pm\sqrt3` also as `2+\sqrt3, 2-\sqrt3`
    refs += [e for e in map(expand_plus_minus, refs) if e]
    dedup = lambda xs: list(dict.fromkeys(x for x in xs if x))  # noqa: E731
    return dedup(preds), dedup(refs)


def canonical_string(s: str) -> str:
    """Whitespace-free comparison key; purely verbal answers are also lower-cased."""
    t = re.sub(r"\s+", "", s)
    t = re.sub(r"([_^])\{([A-Za-z0-9])\}", r"\1\2", t)  # E_{1} -> E_1, x^{2} -> x^2
    if re.fullmatch(r"[A-Za-z ()'\-]+", s):
        t = t.lower().strip("()")
    return t
