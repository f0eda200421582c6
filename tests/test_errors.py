"""Every refusal: its type, and a message that says what was expected and what arrived."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.errors import (
    AttnlabError,
    FullyMaskedRowError,
    NonFiniteInputError,
    ShapeError,
)
from attnlab.masks import Causal, Dense, Padding, SlidingWindow

ones = np.ones


def _nan_at(shape, index, value=np.nan):
    a = np.ones(shape)
    a[index] = value
    return a


def _functional_mha(**change):
    """multi_head_attention on a valid problem (h=2, d_model=4, d_k=2, d_v=3), with changes."""
    args = {
        "w_q": ones((2, 4, 2)),
        "w_k": ones((2, 4, 2)),
        "w_v": ones((2, 4, 3)),
        "w_o": ones((6, 4)),
    } | change
    return al.multi_head_attention(ones((3, 4)), ones((3, 4)), ones((3, 4)), **args)


def test_hierarchy():
    for cls in (ShapeError, FullyMaskedRowError, NonFiniteInputError):
        assert issubclass(cls, AttnlabError)
        assert issubclass(cls, ValueError)
    assert issubclass(AttnlabError, ValueError)
    assert al.errors.ShapeError is al.ShapeError


# (call, error type, regex the message must match)
REFUSALS = {
    "d_k differs": (
        lambda: al.attention(ones((2, 3)), ones((2, 4)), ones((2, 1))),
        ShapeError,
        r"d_k.*q\.shape=\(2, 3\).*k\.shape=\(2, 4\)",
    ),
    "k and v rows differ": (
        lambda: al.attention(ones((2, 3)), ones((4, 3)), ones((5, 2))),
        ShapeError,
        r"rows M.*k\.shape=\(4, 3\).*v\.shape=\(5, 2\)",
    ),
    "batch axes do not broadcast": (
        lambda: al.attention(ones((2, 3, 4)), ones((3, 3, 4)), ones((3, 3, 4))),
        ShapeError,
        r"broadcast.*q\.shape=\(2, 3, 4\).*k\.shape=\(3, 3, 4\)",
    ),
    "1-D q": (
        lambda: al.attention([1.0, 2.0], ones((2, 2)), ones((2, 2))),
        ShapeError,
        r"q\.shape=\(2,\)",
    ),
    "1-D v": (
        lambda: al.attention(ones((2, 2)), ones((2, 2)), [1.0, 2.0]),
        ShapeError,
        r"v\.shape=\(2,\)",
    ),
    "no keys": (
        lambda: al.attention(ones((2, 2)), ones((0, 2)), ones((0, 2))),
        ShapeError,
        r"at least one key.*\(0, 2\)",
    ),
    "ragged rows": (
        lambda: al.attention([[1, 2], [3]], ones((2, 2)), ones((2, 2))),
        ShapeError,
        "rectangular",
    ),
    "strings": (
        lambda: al.attention([["a", "b"]], ones((2, 2)), ones((2, 2))),
        AttnlabError,
        "real numbers",
    ),
    "NaN in q": (
        lambda: al.attention(_nan_at((2, 2), (1, 0)), ones((2, 2)), ones((2, 2))),
        NonFiniteInputError,
        r"in q.*nan.*\(1, 0\).*check_finite=False",
    ),
    "inf in k": (
        lambda: al.attention(ones((2, 2)), _nan_at((2, 2), (0, 1), np.inf), ones((2, 2))),
        NonFiniteInputError,
        r"in k.*inf.*\(0, 1\)",
    ),
    "-inf in v": (
        lambda: al.attention(ones((2, 2)), ones((2, 2)), _nan_at((2, 2), (1, 1), -np.inf)),
        NonFiniteInputError,
        r"in v.*-inf",
    ),
    "scale not a number": (
        lambda: al.attention(ones((2, 2)), ones((2, 2)), ones((2, 2)), scale="big"),
        AttnlabError,
        r"scale.*'big'",
    ),
    "scale NaN": (
        lambda: al.attention(ones((2, 2)), ones((2, 2)), ones((2, 2)), scale=float("nan")),
        AttnlabError,
        "finite scale",
    ),
    "scale inf": (
        lambda: al.trace_attention(ones((2, 2)), ones((2, 2)), ones((2, 2)), scale=np.inf),
        AttnlabError,
        "finite scale",
    ),
    "mask of the wrong shape": (
        lambda: al.attention(ones((3, 2)), ones((3, 2)), ones((3, 2)), mask=ones((4, 3), bool)),
        ShapeError,
        r"\(3, 3\).*\(4, 3\)",
    ),
    "1-D mask": (
        lambda: al.attention(ones((3, 2)), ones((3, 2)), ones((3, 2)), mask=ones(3, bool)),
        ShapeError,
        "at least 2 axes",
    ),
    "padding for the wrong batch": (
        lambda: al.attention(ones((2, 3, 2)), ones((2, 3, 2)), ones((2, 3, 2)), Padding([1, 2, 3])),
        ShapeError,
        r"\(2, 3, 3\).*Padding\(lengths=\[1, 2, 3\]\)",
    ),
    "padding, q without a batch axis": (
        lambda: al.attention(ones((3, 2)), ones((3, 2)), ones((3, 2)), Padding([2])),
        ShapeError,
        r"Padding\(lengths=\[2\]\)",
    ),
    "padding length negative": (lambda: Padding([2, -1]), ValueError, r"lengths >= 0.*-1"),
    "padding length fractional": (lambda: Padding([1.5]), ValueError, r"integer lengths.*1\.5"),
    "padding lengths 2-D": (lambda: Padding([[1, 2]]), ShapeError, r"1-D.*\(1, 2\)"),
    "padding lengths empty": (lambda: Padding([]), ShapeError, r"1-D.*\(0,\)"),
    "window of 0": (lambda: SlidingWindow(0), ValueError, "size to be an integer >= 1, but got 0"),
    "window of 1.5": (lambda: SlidingWindow(1.5), ValueError, "1.5"),
    "window of True": (lambda: SlidingWindow(True), ValueError, "True"),
    "unknown alignment": (lambda: Causal("top_right"), ValueError, r"align.*'top_right'"),
    "dense mask with NaN": (lambda: Dense([[0.0, np.nan]]), ValueError, "NaN"),
    "dense mask with +inf": (lambda: Dense([[0.0, np.inf]]), ValueError, r"\+inf"),
    "dense mask of strings": (lambda: Dense([["a"]]), (TypeError, AttnlabError), "bool or float"),
    "render zero rows": (lambda: Causal().additive(0), ShapeError, r"n to be a positive integer"),
    "render 2.5 keys": (lambda: Causal().allowed(2, 2.5), ShapeError, r"m to be a positive"),
    "sdpa mask and is_causal": (
        lambda: al.scaled_dot_product_attention(
            ones((2, 2)), ones((2, 2)), ones((2, 2)), ones((2, 2), bool), is_causal=True
        ),
        AttnlabError,
        "both",
    ),
    "sdpa dropout 1": (
        lambda: al.scaled_dot_product_attention(
            ones((2, 2)), ones((2, 2)), ones((2, 2)), None, 1.0
        ),
        AttnlabError,
        r"dropout_p.*1\.0",
    ),
    "sdpa dropout negative": (
        lambda: al.scaled_dot_product_attention(
            ones((2, 2)), ones((2, 2)), ones((2, 2)), dropout_p=-0.1
        ),
        AttnlabError,
        r"dropout_p.*-0\.1",
    ),
    "sdpa fully_masked spelling": (
        lambda: al.scaled_dot_product_attention(
            ones((2, 2)), ones((2, 2)), ones((2, 2)), fully_masked="nan"
        ),
        ValueError,
        r"fully_masked.*'nan'",
    ),
    "gqa heads do not divide": (
        lambda: al.scaled_dot_product_attention(
            ones((1, 4, 2, 2)), ones((1, 3, 2, 2)), ones((1, 3, 2, 2)), enable_gqa=True
        ),
        ShapeError,
        r"divides the query heads.*\(1, 4, 2, 2\).*\(1, 3, 2, 2\)",
    ),
    "gqa without a head axis": (
        lambda: al.scaled_dot_product_attention(
            ones((2, 2)), ones((2, 2)), ones((2, 2)), enable_gqa=True
        ),
        ShapeError,
        r"heads.*query\.shape=\(2, 2\)",
    ),
    "heads differ without gqa": (
        lambda: al.scaled_dot_product_attention(
            ones((1, 4, 2, 2)), ones((1, 2, 2, 2)), ones((1, 2, 2, 2))
        ),
        ShapeError,
        "broadcast",
    ),
    "heads do not divide d_model": (
        lambda: al.MultiHeadAttention(8, 3),
        AttnlabError,
        r"divide d_model.*d_model=8 and num_heads=3",
    ),
    "no heads": (lambda: al.MultiHeadAttention(8, 0), AttnlabError, "num_heads to be a positive"),
    "d_model 0": (lambda: al.MultiHeadAttention(0, 1), AttnlabError, "d_model to be a positive"),
    "query width is not d_model": (
        lambda: al.MultiHeadAttention(8, 2, seed=0)(ones((3, 6))),
        ShapeError,
        r"d_model.*query\.shape=\(3, 6\)",
    ),
    "key width is not kdim": (
        lambda: al.MultiHeadAttention(8, 2, kdim=5, seed=0)(ones((3, 8)), ones((4, 6))),
        ShapeError,
        r"kdim.*key\.shape=\(4, 6\)",
    ),
    "padding, multi-head without a batch axis": (
        lambda: al.MultiHeadAttention(4, 2, seed=0)(ones((3, 4)), mask=Padding([1, 3])),
        ShapeError,
        r"batch axis.*Padding\(lengths=\[1, 3\]\).*query\.shape=\(3, 4\)",
    ),
    "bias of the wrong shape": (
        lambda: _functional_mha(b_v=ones((2, 2))),
        ShapeError,
        r"b_v of shape \(2, 3\), but got \(2, 2\)",
    ),
    "per-head weights not 3-D": (
        lambda: _functional_mha(w_q=ones((4, 2))),
        ShapeError,
        r"w_q.*\(h, in, out\).*\(4, 2\)",
    ),
    "w_o of the wrong height": (
        lambda: _functional_mha(w_o=ones((4, 4))),
        ShapeError,
        r"w_o of shape \(h \* d_v, d_model\).*w_o\.shape=\(4, 4\)",
    ),
    "softmax of an all -inf row": (
        lambda: al.softmax([[0.0, 1.0], [-np.inf, -np.inf]]),
        FullyMaskedRowError,
        r"row 1\b.*-inf",
    ),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_refusal(name):
    call, error, pattern = REFUSALS[name]
    with pytest.raises(error, match=pattern):
        call()


def test_check_finite_false_skips_the_check():
    q = _nan_at((2, 2), (0, 0), np.inf)
    with pytest.raises(NonFiniteInputError):
        al.scaled_dot_product_attention(q, ones((2, 2)), ones((2, 2)))
    al.attention(ones((2, 2)), ones((2, 2)), _nan_at((2, 2), (0, 0)), check_finite=False)
    al.scaled_dot_product_attention(
        ones((2, 2)), ones((2, 2)), _nan_at((2, 2), (0, 0)), check_finite=False
    )


# -- fully masked rows: which rows, and which mask ---------------------------------------------


def _rows_error(mask, q_shape, k_rows=None, call=al.attention) -> FullyMaskedRowError:
    q = ones(q_shape)
    k = ones(q_shape[:-2] + (k_rows or q_shape[-2], q_shape[-1]))
    with pytest.raises(FullyMaskedRowError) as info:
        call(q, k, k, mask)
    return info.value


def test_padding_of_length_zero():
    err = _rows_error(Padding([3, 0]), (2, 3, 2))
    assert err.rows == ((1, 0), (1, 1), (1, 2))
    assert "batch element 1 has length 0" in err.blocked_by
    assert "(1, 0), (1, 1), (1, 2)" in str(err) and "Padding(lengths=[3, 0])" in str(err)


def test_padding_of_length_zero_with_heads():
    mha = al.MultiHeadAttention(4, 2, seed=0)
    with pytest.raises(FullyMaskedRowError, match="length 0") as info:
        mha(ones((2, 3, 4)), mask=Padding([3, 0]))
    assert info.value.rows[0] == (1, 0, 0)  # (batch, head, query)


def test_bottom_right_causal_with_more_queries_than_keys():
    err = _rows_error(Causal("bottom_right"), (4, 2), k_rows=2)
    assert err.rows == ((0,), (1,))
    assert err.blocked_by == "Causal(align='bottom_right')"
    assert "query row 0, 1 may attend to no key" in str(err)


def test_a_combination_where_no_single_part_blocks():
    # A window of 1 keeps only key i; padding to length 1 keeps only key 0. Row 1 keeps nothing.
    err = _rows_error(SlidingWindow(1) + Padding([1]), (1, 2, 2))
    assert err.rows == ((0, 1),)
    assert "no single part" in err.blocked_by
    assert "SlidingWindow(size=1) + Padding(lengths=[1])" in err.blocked_by


def test_each_part_alone():
    both = Causal("bottom_right") + Dense(np.array([[False, False], [True, True], [True, True]]))
    err = _rows_error(both, (3, 2), k_rows=2)
    assert err.rows == ((0,),)
    assert "Causal(align='bottom_right') and Dense(bool" in err.blocked_by
    assert "each alone" in err.blocked_by


def test_additive_row_of_minus_inf_through_sdpa():
    bias = np.zeros((3, 3))
    bias[2] = -np.inf
    err = _rows_error(bias, (3, 2), call=al.scaled_dot_product_attention)
    assert err.rows == ((2,),) and "Dense(additive" in err.blocked_by


def test_many_rows_are_summarised():
    err = _rows_error(Padding([0]), (1, 20, 2))
    assert len(err.rows) == 8 and "and 12 more" in str(err)


# -- known bugs in files owned elsewhere (strict xfails: they start passing when fixed) ---------


@pytest.mark.parametrize(
    ("make", "batch"),
    [
        (lambda: Padding([0, 2]), 2),
        (lambda: Padding([3, 0, 2]), 3),
        (lambda: _early_empty_dense(), 2),
    ],
    ids=["padding-first", "padding-middle", "dense"],
)
def test_empty_row_in_an_early_batch_element(make, batch):
    # Mask.blame once broadcast a batched mask to a leading shape cut at the failing row.
    q = ones((batch, 3, 2))
    with pytest.raises(FullyMaskedRowError, match="no key"):
        al.attention(q, q, q, make())


def _early_empty_dense() -> Dense:
    table = np.ones((2, 3, 3), bool)
    table[0, 1] = False  # batch element 0, query 1
    return Dense(table)


@pytest.mark.parametrize(
    "call",
    [
        lambda: Padding([-1]),
        lambda: SlidingWindow(0),
        lambda: Causal("top_right"),
        lambda: Dense([[0.0, np.nan]]),
        lambda: Dense([[1, 0], [1, 1]]),  # integers: ambiguous between bool and additive
        lambda: Dense([["a", "b"]]),
        lambda: al.scaled_dot_product_attention(
            ones((2, 2)), ones((2, 2)), ones((2, 2)), fully_masked="nan"
        ),
    ],
    ids=["padding", "window", "align", "dense", "dense-int", "dense-str", "fully_masked"],
)
def test_argument_errors_are_attnlab_errors(call):
    with pytest.raises(AttnlabError):
        call()


def test_padding_without_a_batch_axis_says_so():
    with pytest.raises(ShapeError, match="batch axis"):
        al.attention(ones((3, 2)), ones((3, 2)), ones((3, 2)), Padding([2]))


@pytest.mark.oracle
def test_from_torch_refuses_extra_key_bias(torch):
    module = torch.nn.MultiheadAttention(4, 2, add_bias_kv=True)
    with pytest.raises(AttnlabError, match="add_bias_kv"):
        al.MultiHeadAttention.from_torch(module)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: al.attention(np.zeros((3, 0)), np.zeros((3, 0)), ones((3, 2))), "d_k >= 1"),
        (lambda: al.attention(np.zeros((0, 4)), ones((3, 4)), ones((3, 2))), "one query row"),
        (lambda: al.trace_attention(np.zeros((0, 4)), ones((3, 4)), ones((3, 2))), "query row"),
        (lambda: al.softmax(np.zeros((2, 0))), "at least one entry"),
        (lambda: al.softmax(np.float64(1.0)), "at least one entry"),
    ],
    ids=["d_k=0", "N=0", "trace N=0", "softmax empty row", "softmax scalar"],
)
def test_empty_axes_are_shape_errors(call, words):
    with pytest.raises(ShapeError, match=words):
        call()


def test_multi_head_names_the_non_finite_weight():
    mha = al.MultiHeadAttention(4, 2, seed=0)
    mha.w_k[1, 2, 0] = np.nan
    with pytest.raises(al.NonFiniteInputError, match=r"w_k, but got nan at index \(1, 2, 0\)"):
        mha(ones((3, 4)))


def test_score_memory_refuses_an_unknown_dtype():
    with pytest.raises(AttnlabError, match="numpy dtype"):
        al.cost.score_memory_bytes(4, dtype="no-such-type")
