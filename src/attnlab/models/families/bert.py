"""BERT: the encoder of ``_encoder.py`` (bidirectional, post-LN, learned absolute positions and
token types), with the masked-LM head when the folder has one.

Shape legend: d_model hidden width, h heads, d = d_model / h, d_ff MLP width, V vocabulary,
T token types, P learned positions.

Tensor names: [bert.]embeddings.{word,position,token_type}_embeddings, embeddings.LayerNorm,
encoder.layer.{i}.{attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
intermediate.dense, output.{dense,LayerNorm}}; the head cls.predictions.{transform.dense,
transform.LayerNorm, bias, decoder (else the word embedding, tied)}. A folder saved from
``BertModel`` has no ``bert.`` prefix and no head: its run's logits are the last hidden state.
A pooler and a next-sentence head, when present, are read and left out of the run.
"""

from __future__ import annotations

from attnlab.errors import AttnlabError
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config, Shape
from attnlab.models._encoder import Encoder
from attnlab.models._layers import activation

__all__ = ["build", "shape_of"]


def shape_of(cfg: Config) -> Shape:
    d_model, heads = cfg.int("hidden_size"), cfg.int("num_attention_heads")
    if d_model % heads:
        raise cfg._bad("num_attention_heads", f"a divisor of hidden_size={d_model}", heads)
    if cfg.get("is_decoder", False):
        raise AttnlabError(
            f"expected an encoder ('is_decoder' false) in {cfg.path}, but got is_decoder=true: "
            "attnlab runs BERT bidirectionally only"
        )
    cfg.choice("position_embedding_type", ("absolute",), "absolute")
    return Shape(
        layers=cfg.int("num_hidden_layers"),
        d_model=d_model,
        heads=heads,
        kv_heads=heads,
        head_dim=d_model // heads,
        vocab=cfg.int("vocab_size"),
        max_positions=cfg.int("max_position_embeddings"),
    )


def _tensors(shape: Shape, d_ff: int, types: int) -> dict[str, tuple[int, ...]]:
    dm = shape.d_model
    e = "embeddings."
    names = {
        e + "word_embeddings.weight": (shape.vocab, dm),
        e + "position_embeddings.weight": (shape.max_positions, dm),
        e + "token_type_embeddings.weight": (types, dm),
        e + "LayerNorm.weight": (dm,),
        e + "LayerNorm.bias": (dm,),
    }
    for i in range(shape.layers):
        p = f"encoder.layer.{i}."
        dense = {
            "attention.self.query": (dm, dm),
            "attention.self.key": (dm, dm),
            "attention.self.value": (dm, dm),
            "attention.output.dense": (dm, dm),
            "intermediate.dense": (d_ff, dm),
            "output.dense": (dm, d_ff),
        }
        for name, size in dense.items():
            names |= {f"{p}{name}.weight": size, f"{p}{name}.bias": (size[0],)}
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            names |= {f"{p}{ln}.weight": (dm,), f"{p}{ln}.bias": (dm,)}
    return names


def _head(ck: Checkpoint, cfg: Config, shape: Shape, embed) -> dict | None:
    p = "cls.predictions."
    if p + "transform.dense.weight" not in ck:
        return None
    dm, vocab = shape.d_model, shape.vocab
    decoder = embed  # tied: the head reads the word embedding
    if p + "decoder.weight" in ck:  # older exports keep the tied copy too: read, so checked
        stored = ck.get(p + "decoder.weight", (vocab, dm))
        decoder = embed if cfg.get("tie_word_embeddings", True) else stored
    bias = p + "bias" if p + "bias" in ck else p + "decoder.bias"
    if bias != p + "decoder.bias" and p + "decoder.bias" in ck:
        ck.get(p + "decoder.bias", (vocab,))  # the same bias saved twice (older exports)
    return {
        "transform": ck.get(p + "transform.dense.weight", (dm, dm)),
        "transform_bias": ck.get(p + "transform.dense.bias", (dm,)),
        "norm": ck.get(p + "transform.LayerNorm.weight", (dm,)),
        "norm_bias": ck.get(p + "transform.LayerNorm.bias", (dm,)),
        "decoder": decoder,
        "bias": ck.get(bias, (vocab,)),
    }


def build(cfg: Config, ck: Checkpoint) -> Encoder:
    shape = shape_of(cfg)
    act = activation(cfg, "hidden_act", "gelu")
    types = cfg.int("type_vocab_size", 2)
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in ck else ""
    sizes = _tensors(shape, cfg.int("intermediate_size"), types)
    w = {name: ck.get(prefix + name, size) for name, size in sizes.items()}
    extras = {
        prefix + "pooler.dense.weight": (shape.d_model, shape.d_model),
        prefix + "pooler.dense.bias": (shape.d_model,),
        "cls.seq_relationship.weight": (2, shape.d_model),
        "cls.seq_relationship.bias": (2,),
    }
    for name, size in extras.items():  # read (so checked), not part of a run's output
        if name in ck:
            w[name] = ck.get(name, size)
    return Encoder(
        shape=shape,
        w=w,
        eps=cfg.number("layer_norm_eps", 1e-12),
        act=act,
        types=types,
        head=_head(ck, cfg, shape, w["embeddings.word_embeddings.weight"]),
    )
