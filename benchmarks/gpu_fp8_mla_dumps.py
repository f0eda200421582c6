"""GPU dumps for verify's FP8 and FlashMLA cases: real CUDA kernels' outputs, judged on the CPU.

Shape legend: FP8: q (2, 512, 8, 128), k, v (2, 512, 2, 128), descales (2, 2); MLA dense: q
(4, 2, 16, 576), k_cache (64, 64, 1, 576), block_table (4, 16), dv = 512.

On a CUDA machine (torch only; attnlab is not needed there) this writes three .safetensors
dumps into $OUT: an FP8 kernel (float8_e4m3fn inputs with per-(sequence, kv head) descales,
dequantised and run through torch's bf16 SDPA, causal, GQA), the same kernel with its descales
forgotten, and a FlashMLA-style dense decode (pages scattered by a random permutation, V the
first 512 columns of K, bottom-right causal over two queries). Judge them anywhere with
``attnlab verify FILE``. Without a GPU it runs on the CPU. Run:

    OUT=/tmp/dumps python benchmarks/gpu_fp8_mla_dumps.py
"""

import os

import torch
from safetensors.torch import save_file

O = os.environ["OUT"]
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
F = torch.nn.functional
B, N, H, HK, D = 2, 512, 8, 2, 128
G = H // HK
f8 = torch.float8_e4m3fn
x = [torch.randn(B, N, h, D, device=dev) * 3 for h in (H, HK, HK)]
x[1][:, :, 0] *= 4  # heads of different ranges: per-head descales matter
sq = x[0].view(B, N, HK, G, D).abs().amax(dim=(1, 3, 4)) / 448
sk, sv = (t.abs().amax(dim=(1, 3)) / 448 for t in x[1:])
q8 = (x[0] / sq.repeat_interleave(G, 1)[:, None, :, None]).to(f8)
k8 = (x[1] / sk[:, None, :, None]).to(f8)
v8 = (x[2] / sv[:, None, :, None]).to(f8)


def run(q, k, v):
    o = F.scaled_dot_product_attention(
        *(t.to(torch.bfloat16).transpose(1, 2) for t in (q, k, v)), is_causal=True, enable_gqa=True
    )
    return o.transpose(1, 2).contiguous()


good = run(
    q8.float() * sq.repeat_interleave(G, 1)[:, None, :, None],
    k8.float() * sk[:, None, :, None],
    v8.float() * sv[:, None, :, None],
)
bad = run(q8.float(), k8.float(), v8.float())
base = {
    "q": q8,
    "k": k8,
    "v": v8,
    "q_descale": sq.float(),
    "k_descale": sk.float(),
    "v_descale": sv.float(),
    "causal": torch.tensor(True),
}
save_file(
    {n: t.cpu().contiguous() for n, t in {**base, "out": good}.items()}, f"{O}/fp8_good.safetensors"
)
save_file(
    {n: t.cpu().contiguous() for n, t in {**base, "out": bad}.items()},
    f"{O}/fp8_nodesc.safetensors",
)
b, sq_, hq, d, dv, page, nb = 4, 2, 16, 576, 512, 64, 64
cache = (torch.randn(nb, page, 1, d, device=dev) / 4).to(torch.bfloat16)
q = (torch.randn(b, sq_, hq, d, device=dev) / 4).to(torch.bfloat16)
lens = torch.tensor([700, 64, 1, 1000], dtype=torch.int32)
table = torch.randperm(nb).view(b, nb // b).to(torch.int32)
outs = []
for i in range(b):
    L = int(lens[i])
    r = torch.arange(L)
    kk = cache[table[i][r // page].long(), (r % page)][:, 0]  # (L, d)
    m = torch.arange(L, device=dev)[None, :] <= torch.arange(sq_, device=dev)[:, None] + L - sq_
    o = F.scaled_dot_product_attention(
        q[i].transpose(0, 1),
        kk[None].expand(hq, L, d),
        kk[None, :, :dv].expand(hq, L, dv),
        attn_mask=m,
        scale=d**-0.5,
    )
    outs.append(o.transpose(0, 1))
save_file(
    {
        "q": q.cpu(),
        "k_cache": cache.cpu(),
        "block_table": table,
        "cache_seqlens": lens,
        "head_dim_v": torch.tensor(dv),
        "causal": torch.tensor(True),
        "out": torch.stack(outs).cpu().contiguous(),
    },
    f"{O}/mla_good.safetensors",
)
print(dev, torch.__version__, "ok")
