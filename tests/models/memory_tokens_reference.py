#!/usr/bin/env python3
"""txl's recurrent memory tokens against PyPI's recurrent-memory-transformer-pytorch (0.7.0), on
the same weights and tokens, where their mathematics is the same: the recurrence itself. The
package's RecurrentMemoryTransformer embeds a segment, packs [tokens read, segment, tokens
written] (read = the tokens the previous segment wrote + read_memory_emb, or read_memory_emb alone
at the start; written = its memory_tokens), runs its layers with residuals, applies its final
norm, and returns the logits of the segment and what it made of the tokens written, which the
next segment reads. txl does the same (docs/model.md, "Recurrent memory tokens").

What differs is inside the layers, and is replaced here by txl's own layer written out in torch,
so that a test shows it is the only difference: the package's layers use RMSNorm, a GEGLU
feed-forward, a learned null key and value, value residuals from the first layer, and
hyper-connections, and put every memory token at rotary position 0 (or add learned absolute
positions to the segment only); txl's pre-norm layer uses LayerNorm, a ReLU feed-forward and
ALiBi over the whole packed row (x-transformers' AlibiPositionalBias). The package is built with
memory_not_causal=False (causal over the whole row, as txl), no XL memories, one residual stream
(plain residuals), zero absolute positions, its norm and output layer given txl's final LayerNorm
and tied output, its embedding txl's table times sqrt(d) (txl's embedding scale).

usage: memory_tokens_reference.py dump.safetensors   (written by the test
MemoryTokens.ThePyPIPackagesRecurrenceEqualsTxlsOnTheSameWeights, in double). Exit 0 when every
per-token loss and every token written agrees to 1e-10 over three segments and the controls
(no memory carried between segments; the embeddings of the tokens read and written swapped)
differ by more than 1e-3; 1 otherwise; 77 when the package is missing.
"""
import math
import sys

try:
    import torch
    import torch.nn.functional as F
    from recurrent_memory_transformer_pytorch import RecurrentMemoryTransformer
    from safetensors.torch import load_file
    from x_transformers.x_transformers import AlibiPositionalBias
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

TOLERANCE = 1e-10
CONTROL = 1e-3


def param(d, name):
    key = "p." + name
    if key not in d:
        raise KeyError(f"{name} not in the dump: {sorted(k for k in d if k.startswith('p.'))}")
    return d[key]


def layer_norm(d, prefix):
    weight, bias = param(d, prefix + ".weight"), param(d, prefix + ".bias")
    norm = torch.nn.LayerNorm(weight.numel()).double()
    with torch.no_grad():
        norm.weight.copy_(weight)
        norm.bias.copy_(bias)
    return norm


class TxlAttention(torch.nn.Module):
    """txl's pre-norm attention with ALiBi, causal over the packed row; called as the package
    calls its Attention, returning (output, next XL memories, values)."""

    def __init__(self, d, l, n_head):
        super().__init__()
        self.norm = layer_norm(d, f"layers.{l}.attn_norm")
        self.qkv = param(d, f"layers.{l}.attn.qkv.weight")
        self.out = param(d, f"layers.{l}.attn.out.weight")
        self.n_head = n_head
        self.alibi = AlibiPositionalBias(heads=n_head, total_heads=n_head).double()

    def forward(self, x, rotary_emb=None, mask=None, xl_memories=None, value_residual=None):
        assert mask is None and xl_memories is None and rotary_emb is None
        b, n, _ = x.shape
        h = self.norm(x)
        q, k, v = F.linear(h, self.qkv).view(b, n, 3, self.n_head, -1).unbind(2)  # [B, N, H, D]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, N, D]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + self.alibi(n, n)
        causal = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1)  # [B, N, H D]
        return F.linear(out, self.out), None, v


class TxlFeedForward(torch.nn.Module):
    def __init__(self, d, l):
        super().__init__()
        self.norm = layer_norm(d, f"layers.{l}.ff_norm")
        self.fc1 = (param(d, f"layers.{l}.ff.fc1.weight"), param(d, f"layers.{l}.ff.fc1.bias"))
        self.fc2 = (param(d, f"layers.{l}.ff.fc2.weight"), param(d, f"layers.{l}.ff.fc2.bias"))

    def forward(self, x):
        return F.linear(F.relu(F.linear(self.norm(x), *self.fc1)), *self.fc2)


def reference(d):
    table = param(d, "word_emb.emb_layers.0.weight")  # [V, d], tied to the output
    vocab, dim = table.shape
    n_head, seg = int(d["n_head"]), int(d["seg"])
    read_emb, write_emb = param(d, "memory_read_emb"), param(d, "memory_write_emb")
    n_layer = len({k.split(".")[2] for k in d if k.startswith("p.layers.")})
    model = RecurrentMemoryTransformer(
        dim, num_tokens=vocab, depth=n_layer, num_memory_tokens=read_emb.size(0), seq_len=seg,
        dim_head=dim // n_head, heads=n_head, use_xl_memories=False, memory_not_causal=False,
        num_residual_streams=1, abs_pos_emb=True).double().eval()
    with torch.no_grad():
        model.token_emb.weight.copy_(table * math.sqrt(dim))
        model.pos_emb.weight.zero_()
        model.read_memory_emb.copy_(read_emb)
        model.memory_tokens.copy_(write_emb)
        for l, (attn, ff) in enumerate(model.layers):
            attn.branch = TxlAttention(d, l, n_head)
            ff.branch = TxlFeedForward(d, l)
        model.norm = layer_norm(d, "final_norm")
        model.to_logits.weight.copy_(table)
        model.to_logits.bias.copy_(param(d, "crit.out_layers.0.bias"))
    return model


def run(model, tokens, targets, seg, carry=True):
    """Per segment: the per-token losses [B, Q] and the tokens written [B, m, d]."""
    nll, written, memory = [], [], None
    with torch.no_grad():
        for s in range(tokens.size(1) // seg):
            part = slice(s * seg, (s + 1) * seg)
            logits, memory, _ = model(tokens[:, part], memory if carry else None)
            nll.append(-logits.log_softmax(-1).gather(-1, targets[:, part, None]).squeeze(-1))
            written.append(memory)
    return torch.stack(nll), torch.stack(written)


def main():
    d = load_file(sys.argv[1])
    model = reference(d)
    seg = int(d["seg"])
    nll, written = run(model, d["tokens"], d["targets"], seg)
    err_nll = (nll - d["txl.nll"]).abs().max().item()
    err_written = (written - d["txl.written"]).abs().max().item()
    control_nll, _ = run(model, d["tokens"], d["targets"], seg, carry=False)
    control = (control_nll - d["txl.nll"]).abs().max().item()
    with torch.no_grad():  # the second control: the tokens read and written swapped
        read_emb = model.read_memory_emb.clone()
        model.read_memory_emb.copy_(model.memory_tokens)
        model.memory_tokens.copy_(read_emb)
    swapped_nll, _ = run(model, d["tokens"], d["targets"], seg)
    swapped = (swapped_nll - d["txl.nll"]).abs().max().item()
    print(f"recurrent-memory-transformer-pytorch, 3 segments: max |txl - reference| per-token "
          f"loss {err_nll:.2e}, tokens written {err_written:.2e}; controls: no memory carried "
          f"{control:.2e}, tokens read and written swapped {swapped:.2e}")
    ok = (err_nll <= TOLERANCE and err_written <= TOLERANCE and control > CONTROL and
          swapped > CONTROL)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
