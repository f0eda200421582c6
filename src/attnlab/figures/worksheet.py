"""A handout: the chapter's worked example with blanks to fill in, and the exercises, as LaTeX,
with a separate answer key (``attnlab worksheet`` writes both and, with pdflatex, their PDFs).

The example's tables are the stepper's (``build_stepper()``: the chapter's two tokens, causal
mask, scaled), so the key's numbers are the explorer's and the CLI's; the exercises are
``attnlab.exercises``, their worked solutions in the key. The LaTeX is plain (article, tabular,
amssymb): any TeX installation compiles it.

Shape legend: N queries, M keys, d_k and d_v widths of the chapter's example (all 2).
"""

from __future__ import annotations

from attnlab import exercises
from attnlab.core.numbers import format_number
from attnlab.figures.stepper import build_stepper

__all__ = ["FILLED", "GIVEN", "worksheet_tex"]

GIVEN = ("q", "k", "v", "mask")  # the tables handed out filled in
FILLED = ("scores", "scaled", "masked", "weights", "output")  # the ones the class works out
BLANK = r"\rule{3.2em}{0.4pt}"
_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&",
            "#": r"\#", "^": r"\^{}", "_": r"\_", "%": r"\%", "~": r"\~{}"}  # fmt: skip
# The characters the chapter's texts use beyond ASCII, as LaTeX without extra packages.
_UNICODE = {"§": r"\S{}", "²": r"\textsuperscript{2}", "·": r"\ensuremath{\cdot}",
            "π": r"\ensuremath{\pi}", "√": r"\ensuremath{\surd}", "−": "-", "∞": r"\ensuremath{\infty}",
            "×": r"\ensuremath{\times}", "ᵀ": r"\textsuperscript{T}", "–": "--", "’": "'",
            "“": "``", "”": "''", "≈": r"\ensuremath{\approx}", "…": r"\ldots{}"}  # fmt: skip


def escape(text: str) -> str:
    """``text`` as LaTeX source: its special characters escaped, its symbols spelled out; a
    character neither covers is replaced by "?" so the file always compiles."""
    out = []
    for c in text:
        out.append(_SPECIAL.get(c) or _UNICODE.get(c) or (c if ord(c) < 128 else "?"))
    return "".join(out)


def _cell(value, blank: bool) -> str:
    if blank:
        return BLANK
    if value == "-inf":
        return r"$-\infty$"
    return "---" if value is None else format_number(value)


def _table(table, blank: bool) -> str:
    """One labelled table: a caption line, then rows and columns with their names."""
    cols = "l" + "r" * len(table.cols)
    head = " & ".join(["", *(escape(c) for c in table.cols)])
    body = [" & ".join([escape(name), *(_cell(x, blank) for x in row)]) + r" \\"
            for name, row in zip(table.rows, table.values, strict=True)]  # fmt: skip
    return "\n".join([rf"\paragraph{{{escape(table.label)}}}", r"\begin{center}",
                      rf"\begin{{tabular}}{{{cols}}}", head + r" \\ \hline", *body,
                      r"\end{tabular}", r"\end{center}"])  # fmt: skip


def _exercise(ex, answers: bool) -> str:
    lines = [rf"\item {escape(ex.question)}"]
    if answers:
        if ex.answer is not None:
            lines.append(rf"\\ \textbf{{Answer:}} {escape(format_number(ex.answer))}")
        lines.append(rf"\\ \textit{{Solution.}} {escape(ex.solution or '')}")
    else:
        lines.append(r"\vspace{5em}")
    return "\n".join(lines)


def worksheet_tex(*, answers: bool = False) -> str:
    """The worksheet (blanks in every table the class computes) or, with ``answers``, its key
    (every table filled, every exercise's answer and worked solution), as one LaTeX document."""
    fig = build_stepper()
    title = "Attention by hand: answer key" if answers else "Attention by hand: worksheet"
    parts = [r"\documentclass[11pt]{article}", r"\usepackage[margin=2cm]{geometry}",
             r"\usepackage{amssymb}", r"\setlength{\parindent}{0pt}", r"\begin{document}",
             rf"\section*{{{title}}}",
             escape("Two tokens, d_k = d_v = 2, the causal mask on and the scores scaled by "
                    f"1/√d_k = {format_number(fig.scale)}. Fill in each table from the one "
                    "before it; the formula beside each name says how."),
             r"\subsection*{Given}"]  # fmt: skip
    parts += [_table(fig.tables[name], blank=False) for name in GIVEN]
    parts.append(r"\subsection*{Work out}")
    parts += [_table(fig.tables[name], blank=not answers) for name in FILLED]
    parts += [r"\subsection*{Exercises}", r"\begin{enumerate}"]
    parts += [_exercise(ex, answers) for ex in exercises.EXERCISES]
    parts += [r"\end{enumerate}", r"\end{document}", ""]
    return "\n".join(parts)
