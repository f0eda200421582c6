"""One way to write a number: core/numbers.py's format_number, and the page's formatNumber
(web/static/js/common.js) agreeing with it case by case.

The JavaScript runs in node when it is installed, else in Chromium through Playwright; with
neither the tie cannot be checked, and the test fails rather than skips.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest

from attnlab.core.numbers import MASKED, NO_VALUE, encode_cell, format_number
from attnlab.errors import AttnlabError
from attnlab.web.app import STATIC

# (value, how a person writes it to four significant digits): read off by hand, not computed.
CASES = [
    (0.0, "0"),
    (-0.0, "0"),
    (-18.0, "-18"),
    (0.5, "0.5"),
    (1.41421356, "1.414"),
    (-12.727922, "-12.73"),
    (0.19557, "0.1956"),
    (0.0010, "0.001"),
    (0.00099995, "1e-3"),  # rounds up into the next decade: still scientific, as written
    (0.0009999, "9.999e-4"),
    (2.967e-6, "2.967e-6"),
    (1e-300, "1e-300"),
    (999.96, "1000"),
    (12345.6, "12346"),
    (999999.4, "999999"),
    (1e6, "1e+6"),
    (2.5e7, "2.5e+7"),
    (-3.14159e9, "-3.142e+9"),
    (1.0625, "1.063"),  # an exact binary tie: away from zero, as toFixed does
    (-1.0625, "-1.063"),
    (0.125, "0.125"),
    (8192.0, "8192"),
    (-math.inf, MASKED),
    (math.inf, "inf"),
    (math.nan, NO_VALUE),
    (None, NO_VALUE),
]


# (value, digits, text): the reader's "more digits", read off by hand.
MORE = [
    (0.19557312, 6, "0.195573"),
    (4.11300001, 8, "4.113"),
    (1 / 3, 8, "0.33333333"),
    (-12.727922, 6, "-12.7279"),
    (2.967e-6, 6, "2.967e-6"),
    (1.23456789e-7, 6, "1.23457e-7"),
    (-3.14159265e9, 8, "-3.1415927e+9"),
    (999999.4, 6, "999999"),
    (0.0009999996, 6, "1e-3"),
    (0.00825, 2, "0.0083"),
]


@pytest.mark.parametrize(("value", "digits", "text"), MORE)
def test_more_digits_when_the_reader_asks(value, digits, text):
    assert format_number(value, digits=digits) == text


@pytest.mark.parametrize("digits", [0, 18, 4.0, True, "6"])
def test_digits_out_of_range_are_refused_by_name(digits):
    with pytest.raises(AttnlabError, match="digits"):
        format_number(1.0, digits=digits)


@pytest.mark.parametrize(("value", "text"), CASES)
def test_format_number_writes_four_significant_digits(value, text):
    assert format_number(value) == text


def test_blocked_and_missing_never_read_alike():
    assert MASKED != NO_VALUE
    assert encode_cell(-math.inf) == "-inf" and format_number(encode_cell(-math.inf)) == MASKED
    assert encode_cell(None) is None and encode_cell(math.nan) is None
    assert format_number(encode_cell(None)) == NO_VALUE


def _js_values() -> list:
    # JSON has no infinities or NaN: name them, and let the script rebuild them.
    named = {math.inf: "Infinity", -math.inf: "-Infinity"}
    out = []
    for value, _ in CASES:
        if value is None:
            out.append(None)
        elif math.isnan(value):
            out.append("NaN")
        elif math.isinf(value):
            out.append(named[value])
        else:
            out.append(value)
    out.append("-inf")  # the blocked pair as JSON carries it
    return out


def _more() -> list:
    return [[value, digits] for value, digits, _ in MORE]


SCRIPT = """
const values = VALUES.map((v) => (v === "NaN" ? NaN : v === "Infinity" ? Infinity
  : v === "-Infinity" ? -Infinity : v));
values[1] = -0;  // JSON drops the sign of -0.0
const out = values.map((v) => formatNumber(v));
const more = MORE.map(([v, d]) => formatNumber(v, d));
"""


def _run_in_node(source: str, values: list) -> list[str]:
    program = (
        f'import {{ formatNumber }} from "{source}";\n'
        f"const VALUES = {json.dumps(values)};\nconst MORE = {json.dumps(_more())};\n"
        f"{SCRIPT}\nconsole.log(JSON.stringify([out, more]));"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", program],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _run_in_chromium(source: str, values: list) -> list[str]:
    from playwright.sync_api import sync_playwright

    with open(source, encoding="utf-8") as f:
        js = f.read()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        page = browser.new_page()
        page.set_content("<html><body></body></html>")
        url = "data:text/javascript," + js.replace("%", "%25").replace("#", "%23")
        page.evaluate(
            "async ([url, VALUES, MORE]) => { const { formatNumber } = await import(url);"
            + SCRIPT
            + " window.__out = [out, more]; }",
            [url, values, _more()],
        )
        out = page.evaluate("window.__out")
        browser.close()
    return out


def test_the_page_formats_every_case_as_python_does():
    source = str(STATIC / "js" / "common.js")
    values = _js_values()
    run = _run_in_node if shutil.which("node") else _run_in_chromium
    got, more = run(source, values)
    expected = [format_number(v) for v, _ in CASES] + [format_number(MASKED)]
    assert got == expected
    assert more == [format_number(v, digits=d) for v, d, _ in MORE]
