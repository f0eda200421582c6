"""The named points, hooks, ablation and patching of ``attnlab.models`` against transformers
with torch hooks, in float64, on the tiny random models of ``test_models_oracle``.

The rotary families are compared to 1e-5 (transformers computes its rotary tables in float32);
GPT-2 to 1e-10.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_models_oracle as oracle
from test_models_oracle import FAMILIES, IDS, close

hf, saved = oracle.hf, oracle.saved  # the tiny checkpoints, as fixtures of this module too

pytestmark = pytest.mark.oracle

INSIDE = ("gpt2", "llama", "mistral", "qwen2", "gemma2", "gpt_oss")
assert set(INSIDE) <= set(FAMILIES)


def rtol(family: str) -> float:
    return 1e-10 if family == "gpt2" else 1e-5


def hidden(hf, model, ids, **kw):
    torch, _ = hf
    with torch.no_grad():
        out = model(torch.as_tensor(ids), output_hidden_states=True, **kw)
    return out.logits.double().numpy(), [h.double().numpy() for h in out.hidden_states]


def blocks(model):
    """transformers' decoder layers (GPT-2's ``h``, the others' ``layers``)."""
    inner = model.transformer if hasattr(model, "transformer") else model.model
    return inner.h if hasattr(inner, "h") else inner.layers


def out_proj(model, layer: int):
    attn = blocks(model)[layer]
    return attn.attn.c_proj if hasattr(attn, "attn") else attn.self_attn.o_proj


@pytest.mark.parametrize("family", INSIDE)
def test_cache_is_transformers_hidden_states(hf, saved, family):
    from attnlab.models import load

    folder, model = saved(family)
    ours = load(folder, dtype="float64")
    run = ours.run(IDS, cache=True)
    logits, states = hidden(hf, model, IDS)
    layers = ours.shape.layers
    assert len(states) == layers + 1
    for i in range(layers):
        close(run.cache[f"blocks.{i}.hook_resid_pre"], states[i], rtol(family))
    # transformers' last hidden state is the final norm's output
    close(run.cache["ln_final.hook_normalized"], states[-1], rtol(family))
    close(run.logits, logits, rtol(family))
    b, n = IDS.shape
    s = ours.shape
    assert run.cache["blocks.1.attn.hook_q"].shape == (b, n, s.heads, s.head_dim)
    assert run.cache["blocks.1.attn.hook_k"].shape == (b, n, s.kv_heads, s.head_dim)
    assert run.cache["blocks.1.attn.hook_z"].shape == (b, n, s.heads, s.head_dim)
    assert run.cache["blocks.0.attn.hook_pattern"].shape == (b, s.heads, n, n)
    np.testing.assert_array_equal(run.cache["blocks.0.attn.hook_pattern"], run.attention[0])
    assert ("hook_pos_embed" in run.cache) == (family == "gpt2")
    last = f"blocks.{layers - 1}.hook_resid_post"
    np.testing.assert_array_equal(
        run.cache[last], run.cache[f"blocks.{layers - 1}.hook_resid_mid"]
        + run.cache[f"blocks.{layers - 1}.hook_mlp_out"],
    )  # fmt: skip


def pre_hook(module, fn):
    """A forward pre-hook on ``module`` changing its first input (positional or keyword)
    with fn(tensor) -> tensor; returns the handle."""

    def hook(mod, args, kwargs):
        if args:
            return (fn(args[0].clone()), *args[1:]), kwargs
        kwargs = dict(kwargs)
        kwargs["hidden_states"] = fn(kwargs["hidden_states"].clone())
        return args, kwargs

    return module.register_forward_pre_hook(hook, with_kwargs=True)


def logits_with(hf, model, ids, handles_of):
    """transformers' logits (float64 numpy) with the hooks ``handles_of()`` registers."""
    torch, _ = hf
    handles = handles_of()
    try:
        with torch.no_grad():
            return model(torch.as_tensor(ids)).logits.double().numpy()
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize("family", INSIDE)
def test_zero_ablating_a_head_is_zeroing_its_slice_before_the_output_projection(hf, saved, family):
    from attnlab.models import ablate, load

    folder, model = saved(family)
    ours = load(folder, dtype="float64")
    d = ours.shape.head_dim
    layer, head = 1, 2

    def zero(x):
        x[..., head * d : (head + 1) * d] = 0
        return x

    theirs = logits_with(hf, model, IDS, lambda: [pre_hook(out_proj(model, layer), zero)])
    close(ablate(ours, IDS, [(layer, head)]).logits, theirs, rtol(family))

    def by_hook(z, name):
        z = z.copy()
        z[:, :, head] = 0
        return z

    hooked = ours.run(IDS, hooks={f"blocks.{layer}.attn.hook_z": by_hook}).logits
    close(hooked, theirs, rtol(family))
    assert np.abs(hooked - ours.run(IDS).logits).max() > 1e-3  # the head mattered


def test_resample_and_mean_ablation_take_the_head_from_elsewhere(hf, saved):
    torch, _ = hf
    from attnlab.models import ablate, load

    folder, model = saved("llama")
    ours = load(folder, dtype="float64")
    d, layer, head = ours.shape.head_dim, 0, 1
    seen = {}

    def keep(x):
        seen["x"] = x.clone()
        return x

    logits_with(hf, model, IDS, lambda: [pre_hook(out_proj(model, layer), keep)])
    cut = slice(head * d, (head + 1) * d)
    clean = seen["x"][..., cut]  # (B, N, d)

    def resample(x):
        x[..., cut] = torch.roll(clean, -1, 0)
        return x

    def mean(x):
        x[..., cut] = clean.mean((0, 1))
        return x

    for how, fn in (("resample", resample), ("mean", mean)):
        theirs = logits_with(hf, model, IDS, lambda fn=fn: [pre_hook(out_proj(model, layer), fn)])
        close(ablate(ours, IDS, [(layer, head)], how).logits, theirs, 1e-5)


@pytest.mark.parametrize("family", ["gpt2", "gemma2"])
def test_patching_positions_of_resid_pre_is_a_layer_pre_hook(hf, saved, family):
    torch, _ = hf
    from attnlab.models import load, patch

    folder, model = saved(family)
    ours = load(folder, dtype="float64")
    clean, corrupt = IDS[:1], IDS[1:]
    _, states = hidden(hf, model, clean)

    def metric(logits):
        return logits[0, -1, 3] - logits[0, -1, 7]

    table = patch(ours, clean, corrupt, metric, over="positions", activation="resid_pre")
    assert table.shape == (ours.shape.layers, IDS.shape[1])
    for layer in range(ours.shape.layers):
        for pos in (0, 4, IDS.shape[1] - 1):

            def put(x, layer=layer, pos=pos):
                x[:, pos] = torch.as_tensor(states[layer][:, pos])
                return x

            block = blocks(model)[layer]
            theirs = logits_with(hf, model, corrupt, lambda put=put, b=block: [pre_hook(b, put)])
            np.testing.assert_allclose(table[layer, pos], metric(theirs), atol=rtol(family) * 10)


def test_patching_heads_is_putting_the_clean_slice_before_the_output_projection(hf, saved):
    from attnlab.models import load, patch

    folder, model = saved("gpt2")
    ours = load(folder, dtype="float64")
    clean, corrupt = IDS[:1], IDS[1:]
    d = ours.shape.head_dim

    def metric(logits):
        return logits[0, -1, 5]

    table = patch(ours, clean, corrupt, metric)
    assert table.shape == (ours.shape.layers, ours.shape.heads)
    for layer in range(ours.shape.layers):
        seen = {}

        def keep(x, seen=seen):
            seen["x"] = x.clone()
            return x

        logits_with(hf, model, clean, lambda layer=layer, keep=keep: [
            pre_hook(out_proj(model, layer), keep)
        ])  # fmt: skip
        for head in range(ours.shape.heads):
            cut = slice(head * d, (head + 1) * d)

            def put(x, cut=cut, seen=seen):
                x[..., cut] = seen["x"][..., cut]
                return x

            theirs = logits_with(hf, model, corrupt, lambda layer=layer, put=put: [
                pre_hook(out_proj(model, layer), put)
            ])  # fmt: skip
            np.testing.assert_allclose(table[layer, head], metric(theirs), atol=1e-9)


@pytest.mark.parametrize("family", INSIDE)
def test_padding_left_and_right_equals_transformers_on_real_tokens(hf, saved, family):
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved(family)
    mask = np.ones(IDS.shape, np.int64)
    mask[0, :3] = 0  # left padding
    mask[1, -2:] = 0  # right padding
    # transformers' eager attention leaves NaN in a left-padded query's row (it sees only pad
    # keys), and 0 · NaN spreads it into real rows a layer later; those rows are zero in
    # attnlab, so they are zeroed here too (no real token's numbers change)
    handles = [
        (b.attn if hasattr(b, "attn") else b.self_attn).register_forward_hook(
            lambda mod, args, out: (torch.nan_to_num(out[0]), *out[1:])
        )
        for b in blocks(model)
    ]
    try:
        with torch.no_grad():
            theirs = model(torch.as_tensor(IDS), attention_mask=torch.as_tensor(mask))
    finally:
        for h in handles:
            h.remove()
    theirs = theirs.logits.double().numpy()
    run = load(folder, dtype="float64").run(IDS, attention_mask=mask)
    real = mask.astype(bool)
    close(run.logits[real], theirs[real], rtol(family))
    w = run.attention[0]  # (B, h, N, N)
    assert not w[0, :, 3:, :3].any() and not w[1, :, :, -2:].any()  # pad keys weigh 0


def test_untied_gpt2_head_is_used(hf, tmp_path):
    torch, transformers = hf
    from attnlab.models import load

    config = transformers.GPT2Config(
        vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=64, tie_word_embeddings=False
    )
    torch.manual_seed(1)
    model = transformers.GPT2LMHeadModel(config).to(torch.float64).eval()
    with torch.no_grad():
        model.lm_head.weight.copy_(torch.randn_like(model.lm_head.weight))
    assert not torch.equal(model.lm_head.weight, model.transformer.wte.weight)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        theirs = model(torch.as_tensor(IDS)).logits.numpy()
    close(load(tmp_path, dtype="float64").run(IDS).logits, theirs, 1e-10)


def final_norm_and_head(model):
    """transformers' final norm and output head modules."""
    inner = model.transformer if hasattr(model, "transformer") else model.model
    return (inner.ln_f if hasattr(inner, "ln_f") else inner.norm), model.lm_head


@pytest.mark.parametrize("family", INSIDE)
def test_logit_lens_is_the_final_norm_and_head_on_hidden_states(hf, saved, family):
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved(family)
    run = load(folder, dtype="float64").run(IDS)
    _, states = hidden(hf, model, IDS)
    norm, head = final_norm_and_head(model)
    cap = getattr(model.config, "final_logit_softcapping", None)
    layers = len(states) - 1
    for layer in range(layers - 1):  # hidden_states[l + 1] is layer l's output
        with torch.no_grad():
            theirs = head(norm(torch.as_tensor(states[layer + 1]))).double().numpy()
        if cap:
            theirs = cap * np.tanh(theirs / cap)
        close(run.logit_lens(layer), theirs, rtol(family))
    np.testing.assert_array_equal(run.logit_lens(layers - 1), run.logits)
    np.testing.assert_array_equal(run.logit_lens(-1), run.logits)


@pytest.mark.parametrize("family", INSIDE)
def test_attribution_adds_up_to_the_logit(hf, saved, family):
    from attnlab.models import load

    folder, model = saved(family)
    ours = load(folder, dtype="float64")
    run = ours.run(IDS)
    theirs = reference_logits(hf, model, IDS)
    cap = getattr(model.config, "final_logit_softcapping", None)
    for batch, pos, token in ((0, 10, 3), (1, 4, 17)):
        parts = run.logit_attribution(pos, token, batch=batch)
        total = sum(parts.values())
        run_with = ours.run(IDS, cache=True)
        pre = run_with.cache["ln_final.hook_normalized"][batch, pos] @ ours.network.lm_head[token]
        assert abs(total - pre) <= 1e-9 * abs(pre)
        want = theirs[batch, pos, token]
        got = cap * np.tanh(total / cap) if cap else total
        assert abs(got - want) <= rtol(family) * np.abs(theirs).max()
        s = ours.shape
        heads = {f"L{i}H{h}" for i in range(s.layers) for h in range(s.heads)}
        assert heads | {"embed", f"L{s.layers - 1}.mlp"} <= set(parts)
        assert ("pos_embed" in parts) == (family == "gpt2")
        diff = run.logit_difference(pos, token, 5, batch=batch)
        direct = {k: v - run.logit_attribution(pos, 5, batch=batch)[k] for k, v in parts.items()}
        assert diff.keys() == direct.keys()
        np.testing.assert_allclose(list(diff.values()), list(direct.values()), atol=1e-12)


def reference_logits(hf, model, ids):
    torch, _ = hf
    with torch.no_grad():
        return model(torch.as_tensor(ids)).logits.double().numpy()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_one_heads_share_by_hand(hf, saved, family):
    from attnlab.models import load

    folder, model = saved(family)
    ours = load(folder, dtype="float64")
    layer, head, batch, pos, token = 1, 3, 1, 9, 11
    d = ours.shape.head_dim
    seen = {}

    def keep(key):
        def fn(x):
            seen[key] = x.clone()
            return x

        return fn

    norm, lm_head = final_norm_and_head(model)
    logits_with(hf, model, IDS, lambda: [
        pre_hook(out_proj(model, layer), keep("z")), pre_hook(norm, keep("final")),
    ])  # fmt: skip
    z = seen["z"][batch, pos, head * d : (head + 1) * d].numpy()  # (d,)
    proj = out_proj(model, layer).weight.detach().double().numpy()
    if family == "gpt2":  # Conv1D (in, out)
        share = z @ proj[head * d : (head + 1) * d]
    else:  # Linear (out, in)
        share = proj[:, head * d : (head + 1) * d] @ z
    x = seen["final"][batch, pos].numpy()  # the final residual (d_model,)
    w = norm.weight.detach().double().numpy()
    if family == "gpt2":
        scaled = (share - share.mean()) * w / np.sqrt(x.var() + norm.eps)
    else:
        scaled = share * w / np.sqrt(np.mean(x * x) + norm.variance_epsilon)
    want = scaled @ lm_head.weight.detach().double().numpy()[token]
    got = ours.run(IDS).logit_attribution(pos, token, batch=batch)[f"L{layer}H{head}"]
    assert abs(got - want) <= rtol(family) * max(1.0, abs(want))


@pytest.mark.parametrize("family", INSIDE)
def test_greedy_generation_is_transformers_token_for_token(hf, saved, family):
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved(family)
    new = 14  # 11 + 14 tokens: past the sliding windows (3 and 4) many times over
    model.generation_config.eos_token_id = None  # never stop early: compare every token
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        theirs = model.generate(
            torch.as_tensor(IDS),
            max_new_tokens=new,
            do_sample=False,
            attention_mask=torch.ones(IDS.shape, dtype=torch.long),  # id 0 is no padding here
        ).numpy()
    ours = load(folder, dtype="float64")
    got = ours.generate(IDS, new)
    np.testing.assert_array_equal(got, theirs)
    steps = list(ours.stream(IDS, 3))
    np.testing.assert_array_equal(np.stack(steps, 1), theirs[:, IDS.shape[1] : IDS.shape[1] + 3])


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_oss", "qwen2"])
@pytest.mark.parametrize("point", ["attn.hook_attn_scores", "attn.hook_pattern"])
def test_scores_and_pattern_taken_by_hand_are_transformers(hf, saved, family, point):
    """A hook that returns its value unchanged sends the layer down the by-hand path (softmax
    with sinks of the hooked scores, pattern · v per kv head); it must still be the model."""
    from attnlab.models import load

    folder, model = saved(family)
    hooks = {f"blocks.{i}.{point}": lambda x, name: x.copy() for i in range(2)}
    run = load(folder, dtype="float64").run(IDS, hooks=hooks)
    close(run.logits, reference_logits(hf, model, IDS), rtol(family))
