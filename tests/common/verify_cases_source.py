"""Source of tests/common/verify_cases.jsonl: hand-labelled verifier cases, wrapped in completion templates.

`python tests/common/verify_cases_source.py` rewrites the JSONL next to this file. Labels are the
truth a careful human grader assigns (strict: approximations of exact values are wrong; a missing box
is wrong). Split: within each category, cases alternate dev / heldout. Rounds are appended, never
reordered, so earlier ids and texts stay stable.
"""
import json, sys

T = True; F = False
TEMPLATES = [
    "To solve this, {step}\n\nStep 2: Simplify the expression carefully and check the arithmetic.\n\nTherefore, the final answer is $\\boxed{{{ans}}}$.",
    "Let's think step by step.\nStep 1: {step}\nStep 2: Checking the computation once more confirms it.\n\nThe answer is \\(\\boxed{{{ans}}}\\).",
    "**Solution.** {step}\n\n**Final Answer**\n\\[\n\\boxed{{{ans}}}\n\\]",
    "{step} Putting everything together we get\n$$\\boxed{{{ans}}}$$",
    "We start from the given conditions. {step} So the result is $\\boxed{{{ans}}}$. I hope it is correct.",
    "Okay, let me work through this.\n\n1. {step}\n2. Combine the pieces.\n\nFinal answer: $\\boxed{{{ans}}}$",
]
STEPS = [
    "First we set up the equation from the problem statement; substituting the known values (2 and 3) and solving for the unknown gives the value below.",
    "Expanding both sides and collecting like terms, the equation reduces to a linear one, which we solve directly.",
    "Using the formula for the sum and plugging in n = 10, we compute each term and add them up.",
    "By symmetry we only need one case; multiplying by the number of cases gives the total.",
    "We apply the Pythagorean theorem to the right triangle with legs 3 and 4, then use similar triangles.",
]

# (category, [(reference, boxed answer, label), ...]) ; the boxed answer is placed in a template
SIMPLE = {
 "integer": [("42","42",T),("7","7",T),("113","131",F),("2024","2024",T),("15","16",F),("0","0",T)],
 "negative": [("-3","-3",T),("-12","12",F),("-\\frac{1}{2}","-0.5",T),("-5","- 5",T),("-7","-(7)",T),("4","-4",F)],
 "fraction_vs_decimal": [("\\frac{1}{2}","0.5",T),("\\frac{3}{4}","0.75",T),("\\frac{1}{3}","0.33",F),("2.5","\\frac{5}{2}",T),("\\frac{7}{8}","0.875",T),("\\frac{2}{3}","0.6",F)],
 "dfrac_tfrac": [("\\frac{11}{2}","\\dfrac{11}{2}",T),("\\frac{13}{4}","\\tfrac{13}{4}",T),("\\frac{1}{4}","\\dfrac{1}{5}",F),("\\tfrac{6400}{27}","\\frac{6400}{27}",T),("\\frac{9}{4}","\\dfrac{4}{9}",F),("\\frac{\\sqrt{3}}{12}","\\dfrac{\\sqrt3}{12}",T)],
 "sqrt": [("\\sqrt{59}","\\sqrt{59}",T),("2\\sqrt{2}","\\sqrt{8}",T),("3\\sqrt{2}","3\\sqrt{3}",F),("\\frac{\\sqrt{3}}{2}","\\frac{1}{2}\\sqrt{3}",T),("\\sqrt{2}","1.414",F),("4\\sqrt{3}","4 \\sqrt 3",T)],
 "pi": [("\\frac{\\pi}{2}","\\pi/2",T),("2\\pi","2 \\pi",T),("4\\pi","4",F),("\\frac{7\\pi}{4}","\\frac{7}{4}\\pi",T),("\\frac{\\pi}{3}","60",F),("25\\pi","25\\pi \\text{ square units}",T)],
 "tuple_point": [("(15,-29)","(15, -29)",T),("(3,4)","(4,3)",F),("\\left( 2, \\frac{7 \\pi}{4} \\right)","(2, \\frac{7\\pi}{4})",T),("(1,2,3)","(1, 2, 3)",T),("(-1,2)","(1,-2)",F),("(0,5)","(0, 5)",T)],
 "interval": [("(2,12) \\cup (12,102)","(2,12)\\cup(12,102)",T),("[1,5)","[1,5)",T),("[1,5)","[1,5]",F),("(-\\infty,-2) \\cup (-1,0)\\cup (1, \\infty)","(-\\infty, -2) \\cup (-1, 0) \\cup (1, \\infty)",T),("(-3,3)","[-3,3]",F),("[0,\\infty)","[0, \\infty)",T)],
 "set_list": [("-2,1","1, -2",T),("-2,1","-2",F),("1,2,3","\\{1, 2, 3\\}",T),("3, 5","5 \\text{ and } 3",T),("2,3","2, 3, 4",F),("\\{-1, 4\\}","-1, 4",T)],
 "matrix_vector": [("\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}","\\begin{pmatrix}-1&0\\\\0&-1\\end{pmatrix}",T),("\\begin{pmatrix} -18 \\\\ -49 \\\\ 96 \\end{pmatrix}","\\begin{pmatrix} 18 \\\\ -49 \\\\ 96 \\end{pmatrix}",F),("\\begin{pmatrix} -18 \\\\ -49 \\\\ 96 \\end{pmatrix}","\\begin{pmatrix} -18 \\\\ -49 \\\\ 96 \\end{pmatrix}",T),("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}","\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}",T),("\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}","\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",F),("\\begin{pmatrix} 1/2 \\\\ 3 \\end{pmatrix}","\\begin{pmatrix} \\frac{1}{2} \\\\ 3 \\end{pmatrix}",T)],
 "degrees": [("76^\\circ","76",T),("336^\\circ","336^\\circ",T),("30","30^{\\circ}",T),("60^\\circ","120^\\circ",F),("45","45°",T),("90","90 \\text{ degrees}",T)],
 "units_text": [("40\\text{ feet}","40",T),("320000 \\mbox{ acres}","320000",T),("5","5 \\text{ cm}",T),("15","16\\text{ cm}",F),("12","12\\mathrm{~cm}^2",T),("8","8 \\text{ inches}",T)],
 "thousands_separator": [("1000","1,000",T),("27648","27,648",T),("10000","1,000",F),("1234567","1,234,567",T),("4000","4{,}000",T),("12500","12,500",T)],
 "trailing_period": [("5","5.",T),("\\frac{1}{2}","\\frac{1}{2}.",T),("3","4.",F),("17","17 .",T),("\\text{Monday}","\\text{Monday.}",T),("2\\sqrt{2}","2\\sqrt{2}.",T)],
 "percent": [("50","50\\%",T),("25\\%","25",T),("40","45\\%",F),("12.5","12.5\\%",T),("20\\%","20\\%",T),("10","10 \\text{ percent}",T)],
 "unicode_minus": [("-3","−3",T),("-\\frac{1}{2}","−\\frac{1}{2}",T),("-7","−8",F),("x-1","x − 1",T),("3","−3",F),("-2,1","−2, 1",T)],
 "unicode_fraction": [("\\frac{1}{2}","½",T),("\\frac{3}{4}","¾",T),("\\frac{1}{3}","⅔",F),("\\frac{5}{2}","2½",T),("0.5","¼",F),("\\frac{1}{4}","¼",T)],
 "unicode_symbols": [("\\frac{\\pi}{2}","π/2",T),("\\sqrt{2}","√2",T),("4\\pi","3π",F),("x^2+1","x²+1",T),("2\\sqrt{3}","2√3",T),("x \\leq 3","x ≤ 3",T)],
 "leading_zeros": [("025","25",T),("033","33",T),("080","8",F),("073","73",T),("045","045",T),("55","055",T)],
 "scientific_notation": [("1.24e-8","1.24 \\times 10^{-8}",T),("4.46e19","4.46 \\times 10^{19}",T),("7.353e14","7.353 \\times 10^{13}",F),("9.35e5","9.35\\times10^5",T),("6.5e-2","0.065",T),("1e11","10^{11}",T)],
 "equation_assignment": [("5","x = 5",T),("12","n=12",T),("3","x = 4",F),("7","a+b=7",T),("\\frac{1}{2}","k = \\frac{1}{2}",T),("2,3","x = 2 \\text{ or } x = 3",T)],
 "nested_braces": [("\\frac{1}{\\sqrt{2}}","\\frac{1}{\\sqrt{2}}",T),("\\frac{\\sqrt{2}}{2}","\\frac{1}{\\sqrt{2}}",T),("\\frac{a^{2}}{b}","\\frac{a^{3}}{b}",F),("2^{\\frac{1}{3}}","\\sqrt[3]{2}",T),("\\frac{1}{2^{10}}","\\frac{1}{1024}",T),("\\frac{\\frac{1}{2}}{3}","\\frac{1}{6}",T)],
 "boxed_wrong": [("12","21",F),("\\frac{1}{2}","\\frac{1}{3}",F),("x+1","x-1",F),("100","10",F),("\\sqrt{3}","3",F),("(1,2)","(1,3)",F)],
 "expression_equivalence": [("2x+1","1+2x",T),("x^2-1","(x-1)(x+1)",T),("2x-1","2x+1",F),("3x+6","3(x+2)",T),("x^2+2x+1","(x+1)^2",T),("\\frac{x+1}{2}","\\frac{x}{2}+\\frac{1}{2}",T)],
 "inequality": [("x \\le 3","x \\leq 3",T),("x > 2","x>2",T),("x < 5","x \\le 5",F),("x \\ge -1","x \\geq -1",T),("x \\leq 3","(-\\infty, 3]",T),("-2 < x < 3","(-2,3)",T)],
 "text_answer": [("\\text{Monday}","\\text{Monday}",T),("\\text{even}","\\text{Even}",T),("\\text{odd}","\\text{even}",F),("\\text{Tuesday}","Tuesday",T),("\\text{yes}","\\text{No}",F),("\\text{neither}","\\text{neither}",T)],
 "base_subscript": [("2516_8","2516_8",T),("1010_2","1010_{2}",T),("2516_8","2561_8",F),("13_9","13_{9}",T),("11001_2","11011_2",F),("1234_5","1234_5",T)],
 "mixed_number": [("\\frac{5}{2}","2\\frac{1}{2}",T),("\\frac{7}{3}","2\\frac{1}{3}",T),("\\frac{9}{4}","2\\frac{1}{2}",F),("3\\frac{1}{4}","\\frac{13}{4}",T),("1\\frac{1}{2}","1.5",T),("\\frac{11}{4}","2 \\frac{3}{4}",T)],
 "complex_number": [("6+9i","6+9i",T),("3 + 4i","4i+3",T),("1-i","1+i",F),("2i","2i",T),("-1+2i","2i-1",T),("i","-i",F)],
 "left_right": [("\\left( 2, \\frac{7 \\pi}{4} \\right)","\\left(2,\\frac{7\\pi}{4}\\right)",T),("(1,2)","\\left(1, 2\\right)",T),("(3,5)","\\left( 3,6 \\right)",F),("\\frac{1}{2}","\\left(\\frac{1}{2}\\right)",T),("[0,1]","\\left[0, 1\\right]",T),("|x|","\\left|x\\right|",T)],
 "currency": [("1500","\\$1,500",T),("18.90","\\$18.90",T),("2.50","\\$2.05",F),("5","\\$5.00",T),("42","42 \\text{ dollars}",T),("0.75","\\$0.75",T)],
 "multiple_choice": [("C","\\text{(C)}",T),("\\text{(B)}","B",T),("E","\\text{(D)}",F),("D","(D)",T),("B","C",F),("A","\\textbf{(A)}",T)],
 "equation_reference": [("y=2x+3","y = 2x + 3",T),("x=5","x = 5",T),("y = 3x","y=2x",F),("y=-x+4","y = 4 - x",T),("x^2+y^2=25","x^2 + y^2 = 25",T),("SRMC=LRMC","SRMC = LRMC",T)],
 "infinity": [("\\infty","\\infty",T),("(-\\infty, 0)","(-∞, 0)",T),("\\infty","-\\infty",F),("[2,\\infty)","[2, ∞)",T),("(-\\infty,5]","(-\\infty, 5)",F),("(1,\\infty)","(1, +\\infty)",T)],
 "approximate_decimal": [("\\frac{1}{3}","0.333",F),("0.554","0.554",T),("\\sqrt{2}","1.41",F),("4.4677","4.4677",T),("0.264","0.2640",T),("3.14","\\pi",F)],
 "math_delimiters": [("5","$5$",T),("\\frac{1}{2}","\\(\\frac{1}{2}\\)",T),("7","$8$",F),("2\\pi","\\displaystyle 2\\pi",T),("9","\\;9\\;",T),("\\frac{3}{5}","\\displaystyle\\frac{3}{5}",T)],
}

# full completions: (category, completion, reference, label)
FULL = [
 ("multiple_boxes", "First attempt: $\\boxed{3}$. Wait, I made an arithmetic slip in step 2; redoing it gives $x = 5$.\n\nFinal answer: $\\boxed{5}$", "5", T),
 ("multiple_boxes", "First attempt: $\\boxed{3}$. Wait, I made an arithmetic slip in step 2; redoing it gives $x = 5$.\n\nFinal answer: $\\boxed{5}$", "3", F),
 ("multiple_boxes", "Case 1 gives $\\boxed{12}$ and case 2 gives $\\boxed{8}$, so in total there are $\\boxed{20}$ arrangements.", "20", T),
 ("multiple_boxes", "Case 1 gives $\\boxed{12}$ and case 2 gives $\\boxed{8}$, so in total there are $\\boxed{20}$ arrangements.", "12", F),
 ("multiple_boxes", "Hmm, the answer might be \\boxed{\\frac{1}{2}}. Actually no: the probability is \\boxed{\\frac{1}{3}}.", "\\frac{1}{3}", T),
 ("multiple_boxes", "The answer is \\boxed{7}. Let me double-check: yes, $\\boxed{7}$ is consistent with both equations.", "7", T),
 ("fbox", "Adding the two counts gives 7.\n\n$\\fbox{7}$", "7", T),
 ("fbox", "Thus the area is \\fbox{$\\frac{25}{2}$}.", "\\frac{25}{2}", T),
 ("fbox", "So we get \\fbox{12} as the number of subsets.", "13", F),
 ("fbox", "The total is \\fbox{1,024} ways.", "1024", T),
 ("fbox", "Hence $n$ equals \\fbox{\\sqrt{17}}.", "\\sqrt{17}", T),
 ("fbox", "Computing the product: \\fbox{-6}.", "6", F),
 ("boxed_space_form", "Summing the series we obtain $\\boxed 5$.", "5", T),
 ("boxed_space_form", "Therefore the remainder is \\boxed 42.", "42", T),
 ("boxed_space_form", "The smallest such integer is $\\boxed 9$.", "8", F),
 ("boxed_space_form", "So the final answer is \\boxed 113", "113", T),
 ("boxed_space_form", "The number of divisors is $\\boxed 16$, as claimed.", "16", T),
 ("boxed_space_form", "Adding up: $\\boxed 27$", "72", F),
 ("unbalanced", "After simplifying we find the answer is $\\boxed{5", "5", F),
 ("unbalanced", "Step 1: 3 + 4 = 7. Step 2: so the answer is \\boxed{\\frac{7}{2}", "\\frac{7}{2}", F),
 ("unbalanced", "Earlier I wrote \\boxed{12} but recomputing, the count is \\boxed{\\frac{12}{", "12", F),
 ("unbalanced", "The answer is \\boxed{{1,2}", "1,2", F),
 ("unbalanced", "So x equals \\boxed{\\sqrt{3}", "\\sqrt{3}", F),
 ("unbalanced", "Therefore the final answer is $\\boxed{", "0", F),
 ("unboxed_correct", "Step 1: 2 + 3 = 5. Step 2: nothing else to add.\n\nThe answer is 5.", "5", F),
 ("unboxed_correct", "Therefore, the final answer is $\\frac{1}{2}$.", "\\frac{1}{2}", F),
 ("unboxed_correct", "**Final Answer:** 42", "42", F),
 ("unboxed_correct", "So the number of ways is 120. I hope it is correct.", "120", F),
 ("unboxed_correct", "Final answer: (2, 3)", "(2,3)", F),
 ("unboxed_correct", "The final answer is $\\boxed$ 17.", "17", F),
 ("unboxed_correct", "Answer: \\[ x = 7 \\]", "7", F),
 ("unboxed_correct", "We conclude that $\\sqrt{2}$ is the minimum value, i.e. the answer is \\sqrt{2}.", "\\sqrt{2}", F),
 ("empty_box", "I could not determine the value, so: $\\boxed{}$", "0", F),
 ("empty_box", "The answer is \\boxed{ }.", "3", F),
 ("empty_box", "Final answer: \\boxed{\\text{}}", "5", F),
 ("empty_box", "The value is 5, i.e. $\\boxed{}$ 5", "5", F),
]

# added after the first held-out evaluation (round 2); same labelling rules
EXTRA = {
 "implicit_product": [("\\frac{1}{m} t","\\frac{t}{m}",T),("\\frac{1}{m} t","\\frac{1}{m}",F),("\\frac{1}{\\sqrt{2}}c","\\frac{c}{\\sqrt{2}}",T),("\\frac{1}{\\sqrt{2}}c","\\frac{1}{\\sqrt{2}}",F),("2 \\pi r","2r\\pi",T),("2\\pi r","2\\pi",F)],
 "subscripted_symbols": [("E_{1},E_{2}","E_1, E_2",T),("x_1","x_{1}",T),("a_{n}","a_{n+1}",F),("v_0 t","t v_{0}",T),("E_1","E_2",F),("F_{10}","F_{10}",T)],
 "unicode_symbols": [("x \\geq 2","x ≥ 2",T),("3\\times 10^{8}","3 × 10⁸",T),("\\frac{1}{2}","1⁄2",T),("\\pi^2","π²",T)],
 "thousands_separator": [("1000000","1,000,000",T),("100000","\\$100{,}000",T),("1001","1,001",T),("2000","20,000",F)],
 "scientific_notation": [("3e8","3 \\times 10^8",T),("2.5\\times10^{-3}","0.0025",T),("6.02 \\times 10^{23}","6.02e23",T),("1.5e3","1500",T)],
 "percent": [("0.25","25\\%",T),("75\\%","0.75",T),("30\\%","3\\%",F),("15","15 \\%",T)],
 "trailing_period": [("(1,2)","(1,2).",T),("\\sqrt{5}","\\sqrt{5}\\,.",T),("12","12.0",T),("8","8.5.",F)],
 "degrees": [("90^\\circ","90^\\circ.",T),("35","35\\text{°}",T),("180","180 \\text{ degrees}",T),("72","27^\\circ",F)],
 "units_text": [("9","9\\text{ m}^2",T),("3.5","3.5 \\text{ hours}",T),("7","7 \\text{ units}",T),("24","25 \\text{ days}",F),("60","60 \\mathrm{mph}",T),("14","14 \\text{ square feet}",T)],
 "equation_assignment": [("-1","y = -1",T),("4","x=-4",F),("\\frac{3}{2}","r = \\frac{3}{2}",T),("8","f(2) = 8",T)],
 "text_answer": [("\\text{Sunday}","Sunday.",T),("\\text{no}","No",T)],
 "multiple_choice": [("\\textbf{(C)}","C",T),("(B)","\\text{B}",T)],
 "currency": [("1.25","\\$1.25.",T),("100","\\$100",T)],
}

# round 3: a blind batch written and labelled before being run (45/45 agreed on first run)
ROUND3 = [("\\frac{\\sqrt{2}}{2}","\\frac{\\sqrt 2}{2}",T),("\\frac{1}{8}","0.125",T),("5","5 \\text{ cm}^2",T),("18","\\text{18}",T),("\\text{(E)}","E",T),
("2","2.00",T),("-\\frac{3}{2}","\\frac{-3}{2}",T),("-\\frac{3}{2}","-1\\frac{1}{2}",T),("\\{1,3\\}","\\{3, 1\\}",T),("x^2+y^2","y^2 + x^2",T),
("8\\sqrt{2}","8 \\sqrt{2} \\text{ units}",T),("\\frac{1}{2}","1/2",T),("\\dfrac{5}{12}","\\frac{5}{12}",T),("12","12\\%",T),("(-2, 3)","(-2,\\ 3)",T),
("\\$32","32",T),("y = -\\frac{1}{2}x + 3","y=-0.5x+3",T),("4","x=4 \\text{ cm}",T),("10","10.",T),("1,2","x=1 \\text{ and } x=2",T),("0","-0",T),
("\\frac{4}{3}\\pi","\\frac{4\\pi}{3}",T),("7","7\\,\\text{m}",T),("2^{10}","1024",T),("1024","2^{10}",T),("\\infty","+\\infty",T),("a=2, b=3","a = 2, b = 3",T),
("6","6 \\text{ (cm)}",T),("\\frac{3}{4}","75\\%",T),("\\frac{1}{6}","\\frac{1}{6} \\approx 0.1667",T),("5","5\\text{.}",T),("3\\sqrt{3}","\\sqrt{27}",T),
("504","504 \\text{ ways}",T),("\\frac{1}{2}","\\frac12",T),("2","3",F),("\\frac{1}{2}","\\frac{2}{1}",F),("x+2","x-2",F),("(1,2)","[1,2]",F),("5\\%","50",F),
("12","1,2",F),("1000","1.000",F),("\\frac{1}{6}","0.1667",F),("3","3x",F),("7","7^2",F),("\\sqrt{2}","2",F)]


# round 4 (issue 24 item 7): six kinds the verifier missed on outside held-out completions. Written and
# labelled before any fix; within each category dev/heldout alternate as everywhere, and fixes were tuned
# on the dev half only (the heldout half was measured before and after, never looked at while tuning).
ROUND4 = {
 "repeating_decimal": [("\\frac{1}{3}","0.\\overline{3}",T),("\\frac{2}{3}","0.\\overline{6}",T),("\\frac{1}{3}","0.\\overline{6}",F),
  ("\\frac{1}{7}","0.\\overline{142857}",T),("\\frac{5}{6}","0.8\\overline{3}",T),("\\frac{1}{6}","0.1\\overline{6}",T),
  ("0.\\overline{3}","\\frac{1}{3}",T),("\\frac{4}{11}","0.\\overline{36}",T),("\\frac{4}{11}","0.\\overline{63}",F),
  ("\\frac{7}{3}","2.\\overline{3}",T),("\\frac{1}{12}","0.08\\overline{3}",T),("\\frac{1}{3}","0.3",F),
  ("\\frac{41}{333}","0.\\overline{123}",T),("0.\\overline{12}","\\frac{4}{33}",T),("\\frac{2}{9}","0.\\bar{2}",T),
  ("-\\frac{1}{3}","-0.\\overline{3}",T),("\\frac{1}{9}","0.\\overline{9}",F),("\\frac{5}{6}","0.\\overline{83}",F)],
 "empty_set": [("\\emptyset","\\varnothing",T),("\\varnothing","\\emptyset",T),("\\emptyset","\\{\\}",T),("\\emptyset","\\{0\\}",F),
  ("\\emptyset","0",F),("\\{\\}","\\varnothing",T),("\\emptyset","∅",T),("\\emptyset","\\{\\emptyset\\}",F),
  ("(1,2)","\\varnothing",F),("\\varnothing","\\left\\{\\right\\}",T),("\\varnothing","\\{ \\}",T),("\\varnothing","\\{1\\}",F),
  ("∅","\\varnothing",T),("\\varnothing","\\emptyset.",T)],
 "number_words": [("2000000","2 \\text{ million}",T),("2000000","2 million",T),("3000","3 \\text{ thousand}",T),
  ("2000000","20 \\text{ million}",F),("1500000","1.5 \\text{ million}",T),("5","\\text{five}",T),("12","\\text{twelve}",T),
  ("7","\\text{six}",F),("3000000000","3 \\text{ billion}",T),("2500","2.5\\text{ thousand}",T),("21","\\text{twenty-one}",T),
  ("100","\\text{one hundred}",T),("4000000","4\\text{ billion}",F),("2 \\text{ million}","2000000",T),("1000000","\\text{one million}",T),
  ("30","\\text{thirteen}",F),("20","\\text{twenty}",T),("2000000","2 \\text{ millions of dollars}",T)],
 "complex_exponential": [("e^{i\\pi/4}","\\frac{\\sqrt{2}}{2}+\\frac{\\sqrt{2}}{2}i",T),("\\frac{\\sqrt{2}}{2}+\\frac{\\sqrt{2}}{2}i","e^{i\\pi/4}",T),
  ("e^{i\\pi/4}","e^{-i\\pi/4}",F),("-1","e^{i\\pi}",T),("i","e^{i\\pi/2}",T),("2e^{i\\pi/3}","1+\\sqrt{3}i",T),
  ("e^{i\\pi/3}","\\cos\\frac{\\pi}{3}+i\\sin\\frac{\\pi}{3}",T),("e^{i\\pi/6}","e^{i\\pi/3}",F),("e^{\\pi i/4}","e^{i\\pi/4}",T),
  ("\\sqrt{2}e^{i\\pi/4}","1+i",T),("1-i","\\sqrt{2}e^{-i\\pi/4}",T),("e^{2\\pi i/3}","-\\frac{1}{2}+\\frac{\\sqrt{3}}{2}i",T),
  ("e^{2\\pi i/3}","-\\frac{1}{2}-\\frac{\\sqrt{3}}{2}i",F),("e^{i3\\pi/4}","e^{i\\frac{3\\pi}{4}}",T),("2e^{i\\pi/3}","e^{i\\pi/3}",F),
  ("-i","e^{-i\\pi/2}",T)],
 "plus_minus": [("\\pm 3","\\pm3",T),("\\pm 3","3, -3",T),("3,-3","\\pm 3",T),("\\pm 3","3",F),("\\pm 3","+-3",T),
  ("2\\pm\\sqrt{3}","2+\\sqrt{3}, 2-\\sqrt{3}",T),("2\\pm\\sqrt{3}","2\\pm\\sqrt{2}",F),("1\\pm\\sqrt{2}","1 \\pm \\sqrt 2",T),
  ("\\pm\\frac{1}{2}","\\pm 0.5",T),("\\pm 2","±2",T),("x=\\pm 2","\\pm 2",T),("\\pm 4","-4",F),
  ("\\frac{-1\\pm\\sqrt{5}}{2}","\\frac{-1+\\sqrt{5}}{2}, \\frac{-1-\\sqrt{5}}{2}",T),("\\pm\\sqrt{3}","-\\sqrt{3}, \\sqrt{3}",T),
  ("3\\pm 2i","3+2i, 3-2i",T),("3\\pm 2i","3 \\pm 2",F),("\\pm 5","5, 5",F),("\\frac{1\\pm\\sqrt{5}}{2}","\\frac{1+\\sqrt{5}}{2}",F)],
 "nested_tuple": [("(1,2)","((1,2))",T),("(3,-4)","\\left(\\left(3,-4\\right)\\right)",T),("(1,2)","((2,1))",F),("(1,2,3)","((1,2,3))",T),
  ("(0,5)","((0, 5))",T),("((1,2))","(1,2)",T),("(2,\\frac{1}{2})","((2, \\frac{1}{2}))",T),("(1,2)","(((1,2)))",T),
  ("(-1,3)","((-1,3))",T),("(4,5)","((4,6))",F),("(1,2,3)","((1,2),3)",F),("(6,7)","\\big((6,7)\\big)",T),
  ("(2,-1)","( (2,-1) )",T),("(1,0)","((0,1))",F)],
}

# round 5: a second blind batch of the same six kinds, written and labelled after the fix, run once
ROUND5 = {
 "repeating_decimal": [("\\frac{1}{11}","0.\\overline{09}",T),("\\frac{2}{3}","0.\\overline{3}",F),("\\frac{13}{6}","2.1\\overline{6}",T),
  ("\\frac{1}{3}","0.\\dot{3}",T)],
 "empty_set": [("\\varnothing","\\{\\,\\}",T),("\\{0\\}","\\varnothing",F),("\\emptyset","\\{\\varnothing\\}",F),("\\varnothing","$\\varnothing$",T)],
 "number_words": [("7000000","7\\text{ million}",T),("600","\\text{six hundred}",T),("15","\\text{fifty}",F),("250000","0.25 \\text{ million}",T),
  ("2","2 \\text{ million}",F),("40","\\text{forty}",T)],
 "complex_exponential": [("e^{i\\pi/6}","\\frac{\\sqrt{3}}{2}+\\frac{1}{2}i",T),("e^{i\\pi/6}","\\frac{1}{2}+\\frac{\\sqrt{3}}{2}i",F),
  ("-i","e^{3\\pi i/2}",T),("4e^{i\\pi}","-4",T)],
 "plus_minus": [("\\pm 7","7,-7",T),("1\\pm 2i","1+2i, 1-2i",T),("\\pm\\sqrt{2}","\\sqrt{2}",F),("4 \\pm \\sqrt{3}","4 +- \\sqrt{3}",T)],
 "nested_tuple": [("(5,-2)","((5,-2))",T),("(5,-2)","((-2,5))",F),("(1,2,3,4)","((1,2,3,4))",T),
  ("(\\frac{1}{2},3)","\\left(\\left(\\frac12, 3\\right)\\right)",T)],
}


def main() -> None:
    rows = []
    k = 0
    for cat, items in SIMPLE.items():
        for i, (ref, ans, lab) in enumerate(items):
            tpl = TEMPLATES[k % len(TEMPLATES)]
            step = STEPS[k % len(STEPS)]
            k += 1
            rows.append({"category": cat, "completion": tpl.format(step=step, ans=ans), "reference": ref, "label": lab})
    for cat, comp, ref, lab in FULL:
        rows.append({"category": cat, "completion": comp, "reference": ref, "label": lab})
    for cat, items in EXTRA.items():
        for i, (ref, ans, lab) in enumerate(items):
            tpl = TEMPLATES[k % len(TEMPLATES)]
            step = STEPS[k % len(STEPS)]
            k += 1
            rows.append({"category": cat, "completion": tpl.format(step=step, ans=ans), "reference": ref, "label": lab})
    for i, (ref, ans, lab) in enumerate(ROUND3):
        comp = ("Let me compute step by step. Simplifying, we obtain the result.\n\n"
                f"The final answer is $\\boxed{{{ans}}}$.")
        rows.append({"category": "assorted", "completion": comp, "reference": ref, "label": lab})
    for cat, items in [*ROUND4.items(), *ROUND5.items()]:
        for i, (ref, ans, lab) in enumerate(items):
            tpl = TEMPLATES[k % len(TEMPLATES)]
            step = STEPS[k % len(STEPS)]
            k += 1
            rows.append({"category": cat, "completion": tpl.format(step=step, ans=ans), "reference": ref, "label": lab})
    counters = {}
    out = []
    for r in rows:
        i = counters.get(r["category"], 0)
        counters[r["category"]] = i + 1
        out.append({"id": f"{r['category']}-{i + 1}", "category": r["category"], "split": "dev" if i % 2 == 0 else "heldout",
                    "completion": r["completion"], "reference": r["reference"], "label": r["label"]})
    from pathlib import Path

    path = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("verify_cases.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(len(out), "cases,", len(counters), "categories")


if __name__ == "__main__":
    main()
