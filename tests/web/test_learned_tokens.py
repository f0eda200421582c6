"""How the learned routes read ``tokens``: ASCII digits, one separator between ids.

``str.isdigit`` passes superscripts and circled digits that ``int`` refuses (a 500 before), and
``int`` reads full-width and Arabic-Indic digits as numbers; a doubled comma dropped an empty
id. Each is a 422 naming ``tokens``, on both routes.
"""

from __future__ import annotations

import pytest

ROUTES = [("/api/learned", {}), ("/api/learned/head", {"layer": 0, "head": 0, "query": 0})]
BAD = ["²", "①", "⁹", "1 ²", "１,2", "١٢", "1,,2", ",1", "1,", "1, ,2", "+1", "-1", "1_0", "0x1"]


@pytest.mark.parametrize(("path", "extra"), ROUTES)
@pytest.mark.parametrize("tokens", BAD)
def test_a_token_not_in_ascii_digits_is_a_422_naming_tokens(client, path, extra, tokens):
    answer = client.get(path, params={**extra, "tokens": tokens})
    assert answer.status_code == 422, (tokens, answer.status_code, answer.text[:200])
    assert answer.json()["detail"][0]["field"] == "tokens"


@pytest.mark.parametrize(("path", "extra"), ROUTES)
@pytest.mark.parametrize("tokens", ["1 2 3", "1,2,3", "1, 2 ,3", " 1  2\t3 ", "001 2 3"])
def test_spaces_or_one_comma_between_ids_are_read(client, path, extra, tokens):
    answer = client.get(path, params={**extra, "tokens": tokens})
    assert answer.status_code == 200, answer.text[:200]
    assert answer.json()["tokens"] == [1, 2, 3]
