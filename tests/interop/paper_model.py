"""A small re-statement of the Transformer-XL paper's PyTorch model (pytorch/mem_transformer.py's
MemTransformerLM, attn_type 0) with its module and parameter names, written from the paper
(sections 3.2-3.3, appendix B) and the code's documented layout, for the interop tests: its
state_dict has the names tools/import_paper.py reads, and its per-token losses are the reference.

Layout as in the paper code: tensors [length, batch, ...]; memory starts empty and keeps the last
mem_len layer inputs; clamp_len <= 0 means no clamp; pre-norm has no final LayerNorm; the
adaptive softmax gives tail cluster i the head's column -i. Only what the tests use (eval mode,
ext_len 0, d_embed = d_model).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class PositionalEmbedding(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, d, 2.0) / d)))

    def forward(self, pos_seq):  # [K] -> [K, 1, d]
        angles = torch.outer(pos_seq, self.inv_freq)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)[:, None, :]


class PositionwiseFF(nn.Module):
    def __init__(self, d_model, d_inner, pre_lnorm):
        super().__init__()
        self.CoreNet = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(inplace=True), nn.Dropout(0.0),
                                     nn.Linear(d_inner, d_model), nn.Dropout(0.0))
        self.layer_norm = nn.LayerNorm(d_model)
        self.pre_lnorm = pre_lnorm

    def forward(self, x):
        if self.pre_lnorm:
            return self.CoreNet(self.layer_norm(x)) + x
        return self.layer_norm(x + self.CoreNet(x))


class RelPartialLearnableMultiHeadAttn(nn.Module):
    def __init__(self, n_head, d_model, d_head, pre_lnorm):
        super().__init__()
        self.n_head, self.d_head, self.pre_lnorm = n_head, d_head, pre_lnorm
        self.qkv_net = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)

    @staticmethod
    def rel_shift(x):  # [Q, K, B, H]: row i shifted so that column j holds distance M + i - j
        pad = torch.zeros((x.size(0), 1, *x.size()[2:]), dtype=x.dtype)
        padded = torch.cat([pad, x], dim=1).view(x.size(1) + 1, x.size(0), *x.size()[2:])
        return padded[1:].view_as(x)

    def forward(self, w, r, r_w_bias, r_r_bias, mask, mems):
        qlen, bsz = w.shape[:2]
        cat = w if mems.numel() == 0 else torch.cat([mems, w], 0)
        heads = self.qkv_net(self.layer_norm(cat) if self.pre_lnorm else cat)
        q, k, v = torch.chunk(heads, 3, dim=-1)
        klen = k.size(0)
        q = q[-qlen:].view(qlen, bsz, self.n_head, self.d_head)
        k = k.view(klen, bsz, self.n_head, self.d_head)
        v = v.view(klen, bsz, self.n_head, self.d_head)
        r_k = self.r_net(r).view(klen, self.n_head, self.d_head)
        ac = torch.einsum("ibnd,jbnd->ijbn", q + r_w_bias, k)
        bd = self.rel_shift(torch.einsum("ibnd,jnd->ijbn", q + r_r_bias, r_k))
        score = (ac + bd) * (1 / self.d_head ** 0.5)
        score = score.float().masked_fill(mask[:, :, :, None], -float("inf")).type_as(score)
        prob = F.softmax(score, dim=1)
        vec = torch.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, bsz, self.n_head * self.d_head)
        out = self.o_net(vec)
        return w + out if self.pre_lnorm else self.layer_norm(w + out)


class RelPartialLearnableDecoderLayer(nn.Module):
    def __init__(self, n_head, d_model, d_head, d_inner, pre_lnorm):
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(n_head, d_model, d_head, pre_lnorm)
        self.pos_ff = PositionwiseFF(d_model, d_inner, pre_lnorm)

    def forward(self, x, r, r_w_bias, r_r_bias, mask, mems):
        return self.pos_ff(self.dec_attn(x, r, r_w_bias, r_r_bias, mask, mems))


class AdaptiveEmbedding(nn.Module):
    def __init__(self, n_token, d, cutoffs, div_val):
        super().__init__()
        self.d, self.div_val, self.scale = d, div_val, d ** 0.5
        self.ends = [0] + cutoffs + [n_token]
        self.emb_layers, self.emb_projs = nn.ModuleList(), nn.ParameterList()
        if div_val == 1:
            self.emb_layers.append(nn.Embedding(n_token, d))
        else:
            for i in range(len(self.ends) - 1):
                width = d // div_val ** i
                self.emb_layers.append(nn.Embedding(self.ends[i + 1] - self.ends[i], width))
                self.emb_projs.append(nn.Parameter(torch.randn(d, width)))

    def forward(self, ids):
        if self.div_val == 1:
            return self.emb_layers[0](ids) * self.scale
        flat = ids.reshape(-1)
        out = torch.zeros(flat.numel(), self.d)
        for i in range(len(self.ends) - 1):
            rows = ((flat >= self.ends[i]) & (flat < self.ends[i + 1])).nonzero().squeeze(1)
            if rows.numel():
                out[rows] = F.linear(self.emb_layers[i](flat[rows] - self.ends[i]), self.emb_projs[i])
        return out.view(*ids.shape, self.d) * self.scale


class ProjectedAdaptiveLogSoftmax(nn.Module):
    def __init__(self, n_token, d, cutoffs, div_val):
        super().__init__()
        self.ends, self.div_val = [0] + cutoffs + [n_token], div_val
        self.n_clusters = len(cutoffs)
        if self.n_clusters:
            self.cluster_weight = nn.Parameter(torch.randn(self.n_clusters, d))
            self.cluster_bias = nn.Parameter(torch.randn(self.n_clusters))
        self.out_layers, self.out_projs = nn.ModuleList(), nn.ParameterList()
        if div_val == 1:
            self.out_layers.append(nn.Linear(d, n_token))
        else:
            for i in range(len(self.ends) - 1):
                width = d // div_val ** i
                self.out_projs.append(nn.Parameter(torch.randn(d, width)))
                self.out_layers.append(nn.Linear(width, self.ends[i + 1] - self.ends[i]))

    def cluster(self, i):  # weight, bias, projection of cluster i
        if self.div_val == 1:
            lo, hi = self.ends[i], self.ends[i + 1]
            return self.out_layers[0].weight[lo:hi], self.out_layers[0].bias[lo:hi], None
        return self.out_layers[i].weight, self.out_layers[i].bias, self.out_projs[i]

    @staticmethod
    def logits(h, weight, bias, proj):
        return F.linear(h if proj is None else F.linear(h, proj.t()), weight, bias)

    def nll(self, h, target):
        """-log p(target) per row, in the rows' own order (the paper code's keep_order)."""
        weight, bias, proj = self.cluster(0)
        if self.n_clusters:
            weight = torch.cat([weight, self.cluster_weight])
            bias = torch.cat([bias, self.cluster_bias])
        head = F.log_softmax(self.logits(h, weight, bias, proj), dim=-1)
        out = torch.empty(target.shape)
        for i in range(len(self.ends) - 1):
            rows = ((target >= self.ends[i]) & (target < self.ends[i + 1])).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            local = target[rows] - self.ends[i]
            if i == 0:
                out[rows] = -head[rows].gather(1, local[:, None]).squeeze(1)
            else:
                tail = F.log_softmax(self.logits(h[rows], *self.cluster(i)), dim=-1)
                out[rows] = -(head[rows, -i] + tail.gather(1, local[:, None]).squeeze(1))
        return out


class MemTransformerLM(nn.Module):
    def __init__(self, n_token, n_layer, n_head, d_model, d_head, d_inner, tie_weight=True,
                 div_val=1, tie_projs=(False,), pre_lnorm=False, mem_len=0, cutoffs=(),
                 same_length=False, clamp_len=-1, **unused):
        super().__init__()
        cutoffs = list(cutoffs)
        self.n_layer, self.d_model, self.mem_len = n_layer, d_model, mem_len
        self.same_length, self.clamp_len = same_length, clamp_len
        self.word_emb = AdaptiveEmbedding(n_token, d_model, cutoffs, div_val)
        self.layers = nn.ModuleList(RelPartialLearnableDecoderLayer(n_head, d_model, d_head, d_inner, pre_lnorm)
                                    for _ in range(n_layer))
        self.crit = ProjectedAdaptiveLogSoftmax(n_token, d_model, cutoffs, div_val)
        if tie_weight:
            for i in range(len(self.crit.out_layers)):
                self.crit.out_layers[i].weight = self.word_emb.emb_layers[i].weight
        for i, tie in enumerate(tie_projs):
            if tie and div_val != 1:
                self.crit.out_projs[i] = self.word_emb.emb_projs[i]
        self.pos_emb = PositionalEmbedding(d_model)
        self.r_w_bias = nn.Parameter(torch.randn(n_head, d_head))
        self.r_r_bias = nn.Parameter(torch.randn(n_head, d_head))

    def init_mems(self):
        return [torch.empty(0) for _ in range(self.n_layer)]

    def forward(self, ids, target, mems):  # ids, target [Q, B] -> nll [Q, B], new mems
        qlen, bsz = ids.shape
        x = self.word_emb(ids)
        mlen = mems[0].size(0)
        klen = mlen + qlen
        ones = torch.ones(qlen, klen, dtype=torch.bool)
        mask = torch.triu(ones, diagonal=1 + mlen)
        if self.same_length:
            shift = qlen - (klen - self.mem_len) if klen - self.mem_len > 0 else qlen
            mask = mask | torch.tril(ones, -shift)
        pos_seq = torch.arange(klen - 1, -1, -1.0)
        if self.clamp_len > 0:
            pos_seq.clamp_(max=self.clamp_len)
        r = self.pos_emb(pos_seq)
        hids = []
        for layer, m in zip(self.layers, mems):
            hids.append(x)
            x = layer(x, r, self.r_w_bias, self.r_r_bias, mask[:, :, None], m)
        new_mems = []
        for h, m in zip(hids, mems):
            cat = h if m.numel() == 0 else torch.cat([m, h], 0)
            new_mems.append(cat[max(0, klen - self.mem_len):klen].detach())
        nll = self.crit.nll(x.reshape(-1, self.d_model), target.reshape(-1)).view(qlen, bsz)
        return nll, new_mems
