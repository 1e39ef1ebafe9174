#!/usr/bin/env python3
"""Hugging Face TransfoXLLMHeadModel weights -> a txl checkpoint (model only, with its word
vocabulary), for txl-eval or as the start of training.

usage: tools/import_hf.py --weights pytorch_model.bin|model.safetensors --config config.json
                          (--vocab vocab.txt | --vocab-from-corpus wiki.train.tokens)
                          --out transfo-xl-wt103.safetensors [--mem-init zeros|empty]

--weights   the model's weights: a safetensors file, or a PyTorch state_dict read with
            torch.load(weights_only=True) (nothing in it is executed)
--config    its config.json (TransfoXLConfig)
--vocab     the word vocabulary, one symbol per line in id order (HF's vocab.pkl is a pickle,
            which this tool never opens; docs/interop.md, "Pretrained `transfo-xl-wt103` in txl", gives the one
            command that writes this file from it), or
--vocab-from-corpus  rebuild it from the training text as the paper code's Vocab does (the
            specials, then words by count, ties in order of first appearance); it must have the
            model's vocabulary size, and gives the original ids only if the original ordered
            ties the same way (docs/interop.md): prefer --vocab where you can
--mem-init  zeros (default): streams start from mem_len zero vectors, as HF's model does, so
            txl reproduces HF's numbers; empty: the paper's PyTorch code's start

Mapped: untied or shared u/v (r_w_bias, r_r_bias), the fused qkv_net, o_net, r_net,
pos_ff.CoreNet, both LayerNorms, adaptive input and softmax of any div_val and cutoffs, the
cluster logits (HF orders them the other way round from txl), tied tables and per-cluster tied
projections (tie_projs). Refused, naming the setting or parameter: weights holding NaN or Inf,
and anything else.
Exit status 0 on success, 1 on a user error (with a message), 2 on bad usage.
"""
import argparse
import json
import sys

import txl_interop as ti


def model_config(hf, origin):
    """TransfoXLConfig (a dict) -> txl's model section."""
    def need(ok, message):
        if not ok:
            raise ti.InteropError(f"{origin}: {message}")

    need(hf.get("attn_type", 0) == 0, f"attn_type {hf.get('attn_type')}: only 0 (relative, the paper's) has a txl counterpart")
    need(hf.get("sample_softmax", -1) <= 0, "sample_softmax > 0 (sampled softmax) has no txl counterpart")
    d_model = hf["d_model"]
    need(hf.get("d_embed", d_model) == d_model, f"d_embed {hf.get('d_embed')} != d_model {d_model}: txl's adaptive input is d_model wide")
    need(abs(hf.get("layer_norm_epsilon", 1e-5) - 1e-5) < 1e-12, f"layer_norm_epsilon {hf.get('layer_norm_epsilon')}: txl's LayerNorms use 1e-5")
    cutoffs = list(hf.get("cutoffs", []))
    need(all(0 < c < hf["vocab_size"] for c in cutoffs), f"cutoffs {cutoffs} must lie inside (0, vocab_size {hf['vocab_size']})")
    # TransfoXLConfig derives tie_projs from proj_share_all_but_first; a hand-written config.json
    # may give either.
    share = bool(hf.get("proj_share_all_but_first", False))
    tie_projs = list(hf.get("tie_projs", [False] + [share] * len(cutoffs)))
    clamp_len = hf.get("clamp_len", 0)
    return {
        "attn_type": "xl",
        "n_layer": hf["n_layer"], "d_model": d_model, "n_head": hf["n_head"], "d_head": hf["d_head"],
        "d_inner": hf["d_inner"], "dropout": float(hf.get("dropout", 0.1)), "dropatt": float(hf.get("dropatt", 0.0)),
        "tgt_len": hf.get("tgt_len", 128), "mem_len": hf.get("mem_len", 0), "ext_len": hf.get("ext_len", 0),
        # HF (like the paper code) clamps only when clamp_len > 0; txl's "no clamp" is -1.
        "clamp_len": clamp_len if clamp_len > 0 else -1,
        "same_length": bool(hf.get("same_length", False)),
        "pre_norm": bool(hf.get("pre_lnorm", False)),
        "final_norm": False,  # HF's pre-norm model, like the paper code's, has no final LayerNorm
        "untie_r": bool(hf.get("untie_r", True)),
        "cutoffs": cutoffs, "div_val": hf.get("div_val", 1),
        "tie_weight": bool(hf.get("tie_word_embeddings", True)),
        # txl ties every tail projection or none; the head's is always the output layer's own.
        "tie_projs": all(tie_projs[1:]) if cutoffs else True,  # without clusters it ties nothing
        "init": hf.get("init", "normal"),
        "init_std": float(hf.get("init_range", 0.01) if hf.get("init") == "uniform" else hf.get("init_std", 0.02)),
        "proj_init_std": float(hf.get("proj_init_std", 0.01)),
        "mem_init": "zeros",
    }


def sections_of(model, mem_init):
    model = dict(model, mem_init=mem_init)
    if not model["pre_norm"]:
        del model["final_norm"]  # nothing to leave out after a post-norm layer
    return {"run": {"name": "imported_hf"},
            "data": {"corpus": "wikitext", "tokenizer": {"type": "word"}},
            "model": model}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--config", required=True)
    vocab = parser.add_mutually_exclusive_group(required=True)
    vocab.add_argument("--vocab")
    vocab.add_argument("--vocab-from-corpus")
    parser.add_argument("--out", required=True)
    parser.add_argument("--mem-init", choices=["zeros", "empty"], default="zeros")
    args = parser.parse_args(argv)
    try:
        with open(args.config, encoding="utf-8") as f:
            hf = json.load(f)
        model = model_config(hf, args.config)
        words, counts = ti.vocab_from_file(args.vocab) if args.vocab else ti.vocab_from_corpus(args.vocab_from_corpus)
        if len(words) != hf["vocab_size"]:
            raise ti.InteropError(f"{args.vocab or args.vocab_from_corpus}: {len(words)} symbols, the model has vocab_size {hf['vocab_size']}")
        state = ti.read_weights(args.weights)
        ti.check_finite(state, args.weights)
        state = ti.fill_tied(state, model, "hf")
        tensors = ti.to_txl(state, model, "hf", args.weights)
        ti.write_checkpoint(args.out, sections_of(model, args.mem_init), words, tensors, counts)
    except (ti.InteropError, OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {len(tensors)} tensors, vocabulary of {len(words)} words, "
          f"tgt_len {model['tgt_len']}, mem_len {model['mem_len']}, clamp_len {model['clamp_len']}, "
          f"same_length {str(model['same_length']).lower()}, mem_init {args.mem_init}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
