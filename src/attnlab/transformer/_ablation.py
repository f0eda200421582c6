"""Which heads to knock out: the ``ablate`` argument of the model's forward methods, checked.

Ablating a head removes its contribution to the residual stream: its output rows (what W^O
reads from it) are replaced before W^O mixes the heads. Two replacements:

    "zero"  the rows become zeros (zero-ablation: as if the head's W^O rows were zero)
    "mean"  each row becomes the head's mean output over the batch's sequences and positions
            (mean-ablation: the head still adds its average, but no longer depends on the input)

Everything else (the other heads, the later layers, the residual path) runs as before, so a
later layer sees what the stream holds without that head.
"""

from __future__ import annotations

from numbers import Integral

from attnlab.errors import AttnlabError

__all__ = ["ABLATIONS", "heads_off"]

ABLATIONS = ("zero", "mean")


def heads_off(config: dict, ablate, ablation: str = "zero") -> dict[int, tuple[int, ...]]:
    """{layer: heads knocked out} from ``ablate``, an iterable of (layer, head) pairs.

    Raises AttnlabError naming the first pair that is not two integers inside the model, or
    an ``ablation`` other than "zero" or "mean".
    """
    if ablation not in ABLATIONS:
        raise AttnlabError(f"expected ablation 'zero' or 'mean', but got {ablation!r} instead")
    layers, heads = config["layers"], config["heads"]
    try:
        pairs = list(ablate)
    except TypeError:
        raise AttnlabError(
            f"expected ablate to be (layer, head) pairs, but got {ablate!r}"
        ) from None
    off: dict[int, set[int]] = {}
    for pair in pairs:
        try:
            layer, head = pair
        except (TypeError, ValueError):
            raise AttnlabError(f"expected each ablate entry to be a (layer, head) pair, but "
                               f"got {pair!r} instead") from None  # fmt: skip
        if not all(isinstance(i, Integral) and not isinstance(i, bool) for i in (layer, head)):
            raise AttnlabError(f"expected ablate entry (layer, head) to be integers, but got "
                               f"{pair!r} instead")  # fmt: skip
        if not (0 <= layer < layers and 0 <= head < heads):
            raise AttnlabError(f"expected ablate entry (layer, head) with layer in 0 … "
                               f"{layers - 1} and head in 0 … {heads - 1}, but got "
                               f"({layer}, {head}) instead")  # fmt: skip
        off.setdefault(int(layer), set()).add(int(head))
    return {layer: tuple(sorted(h)) for layer, h in off.items()}
