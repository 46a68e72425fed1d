"""The verifier's answer-form rewrites (rcea.verify_forms) against hand-computed values, and the
verdicts they change end to end (issue 24 item 7: repeating decimals, the empty set, number words,
complex exponentials, plus-minus answers, nested parentheses around a tuple)."""

from __future__ import annotations

import pytest

from rcea import verify_sandbox
from rcea.verify import verify
from rcea.verify_forms import (
    empty_set,
    expand_plus_minus,
    number_words,
    plus_minus_sign,
    repeating_decimals,
    strip_redundant_parens,
)
from rcea.verify_normalize import normalize_answer


def box(ans: str) -> str:
    return f"Step 1: compute.\n\nThe final answer is $\\boxed{{{ans}}}$."


@pytest.mark.parametrize("text, expected", [
    ("0.\\overline{3}", "\\frac{1}{3}"),          # 3/9
    ("0.\\overline{142857}", "\\frac{1}{7}"),     # 142857/999999
    ("0.8\\overline{3}", "\\frac{5}{6}"),         # 8/10 + 3/90 = 75/90
    ("0.08\\overline{3}", "\\frac{1}{12}"),       # 8/100 + 3/900 = 75/900
    ("2.\\overline{3}", "\\frac{7}{3}"),
    ("0.\\overline{9}", "1"),                      # 9/9
    ("1.\\bar{2}", "\\frac{11}{9}"),
    ("0.\\dot{1}4\\dot{2}", "\\frac{142}{999}"),  # dots over the first and last digit of the period
    ("-0.(36)", "-\\frac{4}{11}"),
    ("x = 0.\\overline{6}", "x = \\frac{2}{3}"),
    ("0.33", "0.33"),                              # no period mark: left alone
    ("0.\\overline{" + "1" * 80 + "}", "0.\\overline{" + "1" * 80 + "}"),  # too long: left alone
])
def test_repeating_decimals(text, expected):
    assert repeating_decimals(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("2 million", "2000000"), ("1.5 \\text{ million}", "1500000"), ("0.25\\text{million}", "250000"),
    ("3 billion", "3000000000"), ("2.5 thousand", "2500"), ("1.2345 thousand", "1234.5"),
    ("2 \\text{ millions of dollars}", "2000000 \\text{of dollars}"),
    ("twenty-one", "21"), ("one hundred and five", "105"), ("a million", "1000000"),
    ("three thousand four hundred twelve", "3412"), ("negative seven", "-7"), ("zero", "0"),
    ("five five", "five five"), ("twenty twelve", "twenty twelve"), ("odd", "odd"), ("a", "a"),
    ("and", "and"), ("hundred", "hundred"), ("Monday", "Monday"),
])
def test_number_words(text, expected):
    assert number_words(text) == expected


def test_empty_set_spellings_and_what_is_not_empty():
    for text in ("\\varnothing", "\\emptyset", "\\{\\}", "\\{ \\}", "\\left\\{\\right\\}", "\u2205", "\\{\\,\\}"):
        assert normalize_answer(text) == "\\emptyset", text
    assert normalize_answer("\\{\\varnothing\\}") != "\\emptyset"
    assert empty_set("\\{0\\}") == "\\{0\\}"


def test_redundant_parentheses_and_plus_minus():
    assert strip_redundant_parens("((1,2))") == "(1,2)"
    assert strip_redundant_parens("( ((1,2)) )") == "(1,2)"
    assert strip_redundant_parens("((1,2),3)") == "((1,2),3)"
    assert strip_redundant_parens("((1,2),(3,4))") == "((1,2),(3,4))"
    assert strip_redundant_parens("([1,2])") == "[1,2]"
    assert plus_minus_sign("+-3") == "\\pm 3" and plus_minus_sign("+/- 3") == "\\pm 3"
    assert expand_plus_minus("2\\pm\\sqrt{3}") == "2+\\sqrt{3}, 2-\\sqrt{3}"
    assert expand_plus_minus("\\mp 5") == "+ 5, - 5"
    assert expand_plus_minus("\\pm 1 \\pm 2") is None     # two signs: not one pair of values
    assert expand_plus_minus("\\pm 1, 4") is None         # already a list


@pytest.fixture(scope="module")
def _worker():
    verify_sandbox.warmup(1)
    yield


@pytest.mark.parametrize("ref, ans, label", [
    ("\\frac{1}{3}", "0.\\overline{3}", True), ("\\frac{1}{3}", "0.\\overline{33}", True),
    ("\\frac{1}{3}", "0.3", False), ("\\frac{1}{3}", "0.333", False), ("1", "0.\\overline{9}", True),
    ("\\emptyset", "\\varnothing", True), ("\\emptyset", "\\{0\\}", False), ("\\{\\}", "\\emptyset", True),
    ("2000000", "2 \\text{ million}", True), ("2", "2 \\text{ million}", False),  # was accepted: unit stripped
    ("21", "\\text{twenty-one}", True), ("12", "\\text{twenty}", False),
    ("e^{i\\pi/4}", "\\frac{\\sqrt{2}}{2}+\\frac{\\sqrt{2}}{2}i", True), ("e^{i\\pi/4}", "e^{-i\\pi/4}", False),
    ("-1", "e^{i\\pi}", True), ("e^{i\\pi/4}", "0.7071+0.7071i", False),  # approximations stay wrong
    ("\\pm 3", "+-3", True), ("\\pm 3", "3", False), ("1\\pm\\sqrt{2}", "1+\\sqrt{2}, 1-\\sqrt{2}", True),
    ("(1,2)", "((1,2))", True), ("(1,2)", "((2,1))", False), ("(1,2,3)", "((1,2),3)", False),
])
def test_verdicts_on_the_six_kinds(_worker, ref, ans, label):
    assert verify(box(ans), ref).correct is label


def test_the_six_kinds_unboxed_are_still_wrong(_worker):
    for ref, ans in (("\\frac{1}{3}", "0.\\overline{3}"), ("2000000", "2 million"), ("\\emptyset", "\\varnothing")):
        assert verify(f"The answer is ${ans}$.", ref).correct is False
