#!/usr/bin/env python3
"""Independent re-computation of a txl xl model in the layout of the Transformer-XL paper's
PyTorch code ([length, batch, ...] tensors, einsum scores, the zero-pad relative shift,
memory = the last mem_len layer inputs), from the formulas of paper sections 3.2-3.3.

usage: paper_reference.py dump.pt   (written by the PaperCrossCheck test: parameters, tokens,
and txl's log-probabilities of two consecutive segments). Exits 0 when both agree to 1e-9.
"""
import math
import sys

import torch
import torch.nn.functional as F


def sinusoid(pos_seq, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0.0, dim, 2.0, dtype=torch.float64) / dim))
    angles = torch.outer(pos_seq, inv_freq)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def rel_shift(x):  # [qlen, klen, bsz, n_head]
    zero_pad = torch.zeros((x.size(0), 1, *x.size()[2:]), dtype=x.dtype)
    padded = torch.cat([zero_pad, x], dim=1).view(x.size(1) + 1, x.size(0), *x.size()[2:])
    return padded[1:].view_as(x)


def main():
    d = torch.load(sys.argv[1])
    n_layer, n_head, d_head, mem_len = (int(d[k]) for k in ("n_layer", "n_head", "d_head", "mem_len"))
    d_model = d["word_emb.emb_layers.0.weight"].size(1)
    tokens = d["tokens"].t()  # [T, B]
    seg = int(d["segment"])

    def layer(l, w, mem):  # w [qlen, bsz, d], mem [mlen, bsz, d] or None
        p = lambda name: d[f"layers.{l}.{name}"]
        qlen, bsz = w.shape[:2]
        cat = w if mem is None else torch.cat([mem, w], 0)
        klen, mlen = cat.size(0), cat.size(0) - qlen
        heads = cat @ p("attn.qkv.weight").t()
        q, k, v = torch.chunk(heads, 3, dim=-1)
        q = q[-qlen:].view(qlen, bsz, n_head, d_head)
        k = k.view(klen, bsz, n_head, d_head)
        v = v.view(klen, bsz, n_head, d_head)
        r = sinusoid(torch.arange(klen - 1, -1, -1.0, dtype=torch.float64), d_model)
        r_k = (r @ p("attn.r_net.weight").t()).view(klen, n_head, d_head)
        ac = torch.einsum("ibnd,jbnd->ijbn", q + d["u_bias"], k)
        bd = rel_shift(torch.einsum("ibnd,jnd->ijbn", q + d["v_bias"], r_k))
        score = (ac + bd) / math.sqrt(d_head)
        future = torch.triu(torch.ones(qlen, klen), diagonal=1 + mlen).bool()[:, :, None, None]
        prob = F.softmax(score.masked_fill(future, -float("inf")), dim=1)
        vec = torch.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, bsz, n_head * d_head)
        a = F.layer_norm(w + vec @ p("attn.out.weight").t(), (d_model,),
                         p("attn_norm.weight"), p("attn_norm.bias"))
        ff = F.relu(a @ p("ff.fc1.weight").t() + p("ff.fc1.bias")) @ p("ff.fc2.weight").t()
        return F.layer_norm(a + ff + p("ff.fc2.bias"), (d_model,),
                            p("ff_norm.weight"), p("ff_norm.bias"))

    emb = d["word_emb.emb_layers.0.weight"]
    mems = [None] * n_layer
    worst = 0.0
    for s in range(2):
        x = emb[tokens[s * seg:(s + 1) * seg]] * math.sqrt(d_model)  # [T, B, d]
        hids = []
        for l in range(n_layer):
            hids.append(x)
            x = layer(l, x, mems[l])
        mems = [(h if m is None else torch.cat([m, h], 0))[-mem_len:] for m, h in zip(mems, hids)]
        logp = F.log_softmax(x @ emb.t() + d["crit.out_layers.0.bias"], dim=-1).transpose(0, 1)
        diff = (logp - d[f"logits{s}"]).abs().max().item()
        worst = max(worst, diff)
        print(f"segment {s}: max |txl - reference| = {diff:.3e}")
    sys.exit(0 if worst < 1e-9 else 1)


if __name__ == "__main__":
    main()
