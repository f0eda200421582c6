"""The tiny transformer's configuration: its constructor's arguments, checked once, and its
parameters' names, shapes and initial values.

Initialisation (``init_std=None``): every weight matrix is N(0, 1/fan_in), so a vector with
entries of variance 1 keeps variance 1 through it; token embeddings have entries of variance 1
(1/2 each for token and position when the model adds positions, whose sum then has variance 1,
the sinusoidal table's entries having mean square 1/2). So at initialisation the queries and
keys have entries of variance about 1, the regime in which §6.3's 1/√d_k matters. A number
``init_std`` draws every embedding and matrix from N(0, init_std²) instead (GPT-2 uses 0.02).
Layer-norm gains start at 1, biases at 0. Values are drawn in float64 from
``numpy.random.default_rng(seed)`` in the order of ``names`` and then cast, so a float32 and a
float64 model of the same seed hold the same numbers up to rounding.
"""

from __future__ import annotations

import math
import os

import numpy as np

from attnlab.errors import AttnlabError

__all__ = ["POSITIONS", "check_config", "initial_params", "parameter_bytes", "shapes"]

POSITIONS = ("learned", "sinusoidal", None)
_DTYPES = {"float32": np.float32, "float64": np.float64}
MAX_VOCAB = 1 << 16
MAX_CONTEXT = 4096
MAX_LAYERS = 64
MAX_D_MODEL = 8192


def _int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise AttnlabError(f"expected {name} to be an integer, but got {value!r} instead")
    if not low <= value <= high:
        raise AttnlabError(f"expected {name} from {low} to {high}, but got {value!r} instead")
    return int(value)


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise AttnlabError(f"expected {name} to be True or False, but got {value!r} instead")
    return bool(value)


def check_config(*, vocab_size, context, layers, heads, d_model, mlp, positions, causal,
                 scaled, dtype, seed, init_std) -> dict:  # fmt: skip
    """The constructor's arguments, validated, as plain JSON-ready values (dtype by name)."""
    config = {
        "vocab_size": _int("vocab_size", vocab_size, 2, MAX_VOCAB),
        "context": _int("context", context, 1, MAX_CONTEXT),
        "layers": _int("layers", layers, 1, MAX_LAYERS),
        "heads": _int("heads", heads, 1, MAX_D_MODEL),
        "d_model": _int("d_model", d_model, 1, MAX_D_MODEL),
        "mlp": _flag("mlp", mlp),
        "causal": _flag("causal", causal),
        "scaled": _flag("scaled", scaled),
        "seed": _int("seed", seed, 0, 2**63 - 1),
    }
    if config["d_model"] % config["heads"]:
        raise AttnlabError(f"expected d_model divisible by heads, but got d_model={d_model} "
                           f"and heads={heads} instead")  # fmt: skip
    if positions not in POSITIONS:
        raise AttnlabError(f"expected positions to be one of {POSITIONS}, but got "
                           f"{positions!r} instead")  # fmt: skip
    config["positions"] = positions
    name = np.dtype(dtype).name if _is_dtype(dtype) else None
    if name not in _DTYPES:
        raise AttnlabError(f"expected dtype float32 or float64, but got {dtype!r} instead")
    config["dtype"] = name
    if init_std is not None:
        if isinstance(init_std, bool) or not isinstance(init_std, int | float | np.floating):
            raise AttnlabError(f"expected init_std to be a number or None, but got "
                               f"{init_std!r} instead")  # fmt: skip
        if not (math.isfinite(init_std) and init_std > 0):
            raise AttnlabError(f"expected init_std > 0, but got {init_std!r} instead")
        init_std = float(init_std)
    config["init_std"] = init_std
    _check_memory(config)
    return config


def parameter_bytes(config: dict) -> int:
    """The bytes of every parameter of ``config`` in its dtype."""
    count = sum(math.prod(shape) for shape in shapes(config).values())
    return count * np.dtype(dtype_of(config)).itemsize


def _machine_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that reports it
        return None


def _check_memory(config: dict) -> None:
    """Refuse, before a parameter is drawn, a model whose parameters (and the float64 draw of
    its largest one) pass half this machine's memory: a legal config can ask for 400 GB."""
    largest = max(math.prod(shape) for shape in shapes(config).values())
    need = parameter_bytes(config) + 8 * largest
    have = _machine_bytes()
    if have is not None and need > have // 2:
        raise AttnlabError(
            f"expected a model that fits half this machine's memory ({have / 2**31:.1f} GiB), "
            f"but vocab_size={config['vocab_size']}, context={config['context']}, "
            f"layers={config['layers']}, d_model={config['d_model']}, mlp={config['mlp']} in "
            f"{config['dtype']} needs {need / 2**30:.1f} GiB for its parameters alone"
        )


def _is_dtype(dtype) -> bool:
    try:
        np.dtype(dtype)
    except (TypeError, ValueError):
        return False
    return True


def dtype_of(config: dict) -> type:
    return _DTYPES[config["dtype"]]


def shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter's name -> shape, in the order they are drawn."""
    v, d, h = config["vocab_size"], config["d_model"], config["heads"]
    e, f = d // h, 4 * d
    out = {"embed": (v, d)}
    if config["positions"] == "learned":
        out["positions"] = (config["context"], d)
    for layer in range(config["layers"]):
        pre = f"layer{layer}."
        if config["mlp"]:
            out |= {pre + "norm1.gain": (d,), pre + "norm1.bias": (d,)}
        out |= {pre + "w_q": (h, d, e), pre + "w_k": (h, d, e), pre + "w_v": (h, d, e),
                pre + "w_o": (h * e, d)}  # fmt: skip
        if config["mlp"]:
            out |= {pre + "norm2.gain": (d,), pre + "norm2.bias": (d,),
                    pre + "mlp.w_in": (d, f), pre + "mlp.b_in": (f,),
                    pre + "mlp.w_out": (f, d), pre + "mlp.b_out": (d,)}  # fmt: skip
    if config["mlp"]:
        out |= {"norm.gain": (d,), "norm.bias": (d,)}
    out["unembed"] = (d, v)
    return out


def _std(name: str, shape: tuple[int, ...], config: dict) -> float:
    if config["init_std"] is not None:
        return config["init_std"]
    if name in ("embed", "positions"):
        return math.sqrt(0.5) if config["positions"] is not None else 1.0
    return 1.0 / math.sqrt(shape[-2])  # fan_in: the axis a vector is multiplied along


def initial_params(config: dict) -> dict[str, np.ndarray]:
    """Fresh parameters for ``config``, drawn as the module's docstring says."""
    rng = np.random.default_rng(config["seed"])
    dtype = dtype_of(config)
    params = {}
    for name, shape in shapes(config).items():
        if name.endswith(".gain"):
            value = np.ones(shape)
        elif name.endswith(".bias") or ".b_" in name:
            value = np.zeros(shape)
        else:
            value = rng.standard_normal(shape) * _std(name, shape, config)
        params[name] = value.astype(dtype)
    return params
