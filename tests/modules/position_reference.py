#!/usr/bin/env python3
"""txl's rotary, ALiBi and T5 attention against the PyPI packages that define them, on the same
weights: rotary-embedding-torch's RotaryEmbedding (queries turned to the positions after the
memory with its `offset`), x-transformers' AlibiPositionalBias (its slopes, also for a head
count that is not a power of two, and its query-key distances) and x-transformers'
RelativePositionBias (T5's causal buckets and bias per head; its table is multiplied by sqrt(D)
where txl's is not, so it is given txl's table divided by sqrt(D)), with the rest of the attention
(projections, scale, masking, softmax, heads) written out here in a few lines; and, for the
rotary cases, x-transformers' own Attention with its Transformer-XL memory (`mem`, `mem_mask`,
its RotaryEmbedding over the positions -M .. Q-1 as its Decoder makes them), whole.

usage: position_reference.py dump.safetensors   (written by the test
Attention.RotaryAndAlibiEqualPyPIsReferences: per scheme its weights, inputs and txl's output, in
double). Exit 0 when every case agrees (ALiBi and T5
to 1e-10; rotary to 1e-6, because rotary-embedding-torch computes its frequencies in float32
before they are made double) and the controls differ by more than 1e-3; 1 otherwise; 77 when a
package is missing.
"""
import math
import sys

try:
    import torch
    from rotary_embedding_torch import RotaryEmbedding
    from safetensors.torch import load_file
    from x_transformers.x_transformers import AlibiPositionalBias
    from x_transformers.x_transformers import Attention as XAttention
    from x_transformers.x_transformers import RelativePositionBias
    from x_transformers.x_transformers import RotaryEmbedding as XRotaryEmbedding
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

ALIBI_TOLERANCE = 1e-10
ROTARY_TOLERANCE = 1e-6
CONTROL = 1e-3


def attention(d, prefix, position_scores):
    """y [B, Q, d] of the attention whose weights and inputs `d` holds under `prefix`."""
    x, mem, keep = d[prefix + "x"], d[prefix + "mem"], d[prefix + "keep"]
    w, w_out = d[prefix + "qkv"], d[prefix + "out"]
    n_head, d_head = int(d[prefix + "n_head"]), int(d[prefix + "d_head"])
    b, q_len, m_len = x.size(0), x.size(1), mem.size(1)
    k_len = m_len + q_len
    hd = n_head * d_head
    h = torch.cat([mem, x], 1)                                                   # [B, K, d]
    q = (x @ w[:hd].t()).view(b, q_len, n_head, d_head).transpose(1, 2)         # [B, H, Q, D]
    k = (h @ w[hd:2 * hd].t()).view(b, k_len, n_head, d_head).transpose(1, 2)   # [B, H, K, D]
    v = (h @ w[2 * hd:].t()).view(b, k_len, n_head, d_head).transpose(1, 2)     # [B, H, K, D]
    scores = position_scores(q, k, m_len)                                       # [B, H, Q, K]
    causal = torch.arange(k_len)[None, :] <= torch.arange(m_len, k_len)[:, None]  # [Q, K]
    visible = causal[None, None] & keep[:, None, None, :]
    scores = scores.masked_fill(~visible, -1e30)
    out = torch.softmax(scores, -1) @ v                                          # [B, H, Q, D]
    return out.transpose(1, 2).reshape(b, q_len, hd) @ w_out.t()                # [B, Q, d]


def rotary_scores(d_head, query_offset):
    rope = RotaryEmbedding(dim=d_head).double()

    def scores(q, k, m_len):
        turned_q = rope.rotate_queries_or_keys(q, seq_dim=-2, offset=query_offset(m_len))
        turned_k = rope.rotate_queries_or_keys(k, seq_dim=-2)
        return turned_q @ turned_k.transpose(-1, -2) / math.sqrt(d_head)
    return scores


def alibi_scores(n_head, d_head, reverse_heads=False):
    alibi = AlibiPositionalBias(heads=n_head, total_heads=n_head).double()

    def scores(q, k, m_len):
        bias = alibi(q.size(-2), k.size(-2))  # [H, Q, K], queries the last Q of the keys
        return q @ k.transpose(-1, -2) / math.sqrt(d_head) + (bias.flip(0) if reverse_heads else bias)
    return scores


def t5_scores(d, prefix, queries_from_zero=False):
    """T5's scores with x-transformers' RelativePositionBias holding txl's table; queries_from_zero:
    the buckets of queries counted from the segment's start, not after the memory (the
    control)."""
    n_head, d_head = int(d[prefix + "n_head"]), int(d[prefix + "d_head"])
    table = d[prefix + "rel_bias"]  # [buckets, H]
    t5 = RelativePositionBias(scale=d_head ** 0.5, causal=True, heads=n_head,
                              num_buckets=table.size(0),
                              max_distance=int(d[prefix + "max_distance"])).double()
    with torch.no_grad():
        t5.relative_attention_bias.weight.copy_(table / math.sqrt(d_head))

    def scores(q, k, m_len):
        q_len, k_len = q.size(-2), k.size(-2)
        if queries_from_zero:  # query i at position i instead of m_len + i
            distance = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]   # [Q, K]
            buckets = t5._relative_position_bucket(distance, causal=True,
                                                   num_buckets=t5.num_buckets,
                                                   max_distance=t5.max_distance)
            bias = t5.relative_attention_bias(buckets).permute(2, 0, 1) * t5.scale  # [H, Q, K]
        else:
            bias = t5(q_len, k_len)  # [H, Q, K], queries the last Q of the keys
        return q @ k.transpose(-1, -2) / math.sqrt(d_head) + bias
    return scores


def x_transformers_xl(d, prefix, show_padding=False):
    """y [B, Q, d] of x-transformers' Attention reading the memory as its Transformer-XL
    recurrence does, on the weights under `prefix`; show_padding: the memory's padding visible
    (the control)."""
    x, mem, keep = d[prefix + "x"], d[prefix + "mem"], d[prefix + "keep"]
    w, w_out = d[prefix + "qkv"], d[prefix + "out"]
    n_head, d_head = int(d[prefix + "n_head"]), int(d[prefix + "d_head"])
    hd, m_len, q_len = n_head * d_head, mem.size(1), x.size(1)
    attn = XAttention(dim=x.size(2), dim_head=d_head, heads=n_head, causal=True).double().eval()
    with torch.no_grad():
        attn.to_q.weight.copy_(w[:hd])
        attn.to_k.weight.copy_(w[hd:2 * hd])
        attn.to_v.weight.copy_(w[2 * hd:])
        attn.to_out.weight.copy_(w_out)
        rotary = XRotaryEmbedding(d_head)(torch.arange(q_len + m_len) - m_len)
        mem_mask = torch.ones_like(keep[:, :m_len]) if show_padding else keep[:, :m_len]
        assert bool(keep[:, m_len:].all()), "the segment has no padding in these cases"
        return attn(x, mem=mem, mem_mask=mem_mask, rotary_pos_emb=rotary)


def worst(d, prefix, scores):
    got = d[prefix + "y"]
    return float((attention(d, prefix, scores) - got).abs().max())


def main():
    d = load_file(sys.argv[1])  # data only: nothing in the file runs
    ok = True
    for prefix in sorted({k.split(".")[0] + "." for k in d if k.startswith("rotary")}):
        d_head = int(d[prefix + "d_head"])
        err = worst(d, prefix, rotary_scores(d_head, lambda m: m))
        # Control: queries turned to their place in the segment (offset 0) instead of after the
        # memory disagree.
        control = worst(d, prefix, rotary_scores(d_head, lambda m: 0))
        print(f"{prefix} rotary-embedding-torch: max |txl - reference| = {err:.3e}; "
              f"queries without the memory's offset: {control:.3e}")
        ok = ok and err <= ROTARY_TOLERANCE and control > CONTROL
        got = d[prefix + "y"]
        err = float((x_transformers_xl(d, prefix) - got).abs().max())
        control = float((x_transformers_xl(d, prefix, show_padding=True) - got).abs().max())
        print(f"{prefix} x-transformers Attention with its Transformer-XL memory: max |txl - "
              f"reference| = {err:.3e}; the memory's padding shown: {control:.3e}")
        ok = ok and err <= ROTARY_TOLERANCE and control > CONTROL
    for prefix in sorted({k.split(".")[0] + "." for k in d if k.startswith("alibi")}):
        n_head, d_head = int(d[prefix + "n_head"]), int(d[prefix + "d_head"])
        err = worst(d, prefix, alibi_scores(n_head, d_head))
        # Control: the heads' slopes in reverse order disagree.
        control = worst(d, prefix, alibi_scores(n_head, d_head, reverse_heads=True))
        print(f"{prefix} x-transformers AlibiPositionalBias ({n_head} heads): max |txl - reference| = "
              f"{err:.3e}; slopes in reverse head order: {control:.3e}")
        ok = ok and err <= ALIBI_TOLERANCE and control > CONTROL
    for prefix in sorted({k.split(".")[0] + "." for k in d if k.startswith("t5")}):
        err = worst(d, prefix, t5_scores(d, prefix))
        # Control: the queries' distances counted from the segment's start, as if there were no
        # memory before it, disagree.
        control = worst(d, prefix, t5_scores(d, prefix, queries_from_zero=True))
        print(f"{prefix} x-transformers RelativePositionBias: max |txl - reference| = {err:.3e}; "
              f"queries counted from the segment's start: {control:.3e}")
        ok = ok and err <= ALIBI_TOLERANCE and control > CONTROL
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
