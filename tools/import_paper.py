#!/usr/bin/env python3
"""Weights of the Transformer-XL paper's PyTorch code (MemTransformerLM, github.com/kimiyoung/
transformer-xl, pytorch/mem_transformer.py) -> a txl checkpoint (model only, with its word
vocabulary).

usage: tools/import_paper.py --weights state_dict.pt|.safetensors --hparams hparams.json
                             (--vocab vocab.txt | --vocab-from-corpus train.txt) --out model.safetensors

--weights   the model's state_dict (model.state_dict()), read with torch.load(weights_only=True),
            or a safetensors file of it. The paper's train.py saves the whole pickled module
            (model.pt); convert it once, where you trust the file and have the paper's code:
                torch.save(torch.load("model.pt").state_dict(), "state_dict.pt")
--hparams   JSON of MemTransformerLM's constructor arguments: n_token, n_layer, n_head, d_model,
            d_head, d_inner, dropout, dropatt, tie_weight, d_embed, div_val, tie_projs, pre_lnorm,
            tgt_len, ext_len, mem_len, cutoffs, same_length, attn_type, clamp_len, sample_softmax
            (train.py's arguments under these names; absent ones take MemTransformerLM's defaults),
            and untie_r (absent: true when the state_dict has per-layer r_w_bias, as the paper's
            TensorFlow code and forks of the PyTorch code write them; the PyTorch code shares them)
--vocab     the vocabulary, one symbol per line in id order (the paper code's vocab.idx2sym), or
--vocab-from-corpus  rebuild it from the training text as the paper code's Vocab does

Conversions, each named in the output: clamp_len 0 or -1 (the paper's "no clamp") becomes txl's
-1 (txl refuses 0, which would clamp every distance to 0); pre_lnorm becomes pre_norm with
final_norm: false (the paper's pre-norm model has no LayerNorm after the last layer).
Refused, naming the parameter or setting: anything txl cannot represent (attn_type other than 0,
sampled softmax, d_embed != d_model, a state_dict entry without a txl counterpart) and weights
holding NaN or Inf.
Exit status 0 on success, 1 on a user error (with a message), 2 on bad usage.
"""
import argparse
import json
import sys

import txl_interop as ti

# MemTransformerLM's defaults for what a hyperparameter file may leave out.
DEFAULTS = dict(dropout=0.0, dropatt=0.0, tie_weight=True, d_embed=None, div_val=1, tie_projs=[False],
                pre_lnorm=False, tgt_len=None, ext_len=None, mem_len=None, cutoffs=[], same_length=False,
                attn_type=0, clamp_len=-1, sample_softmax=-1)


def model_config(hp, origin):
    """MemTransformerLM's hyperparameters -> txl's model section, and the notes of what changed."""
    hp = dict(DEFAULTS, **hp)
    notes = []

    def need(ok, message):
        if not ok:
            raise ti.InteropError(f"{origin}: {message}")

    for key in ("n_token", "n_layer", "n_head", "d_model", "d_head", "d_inner"):
        need(key in hp, f"'{key}' is missing")
    need(hp["attn_type"] == 0, f"attn_type {hp['attn_type']}: only 0 (the paper's relative attention) has a txl counterpart")
    need(hp["sample_softmax"] <= 0, "sample_softmax > 0 (sampled softmax) has no txl counterpart")
    d_model = hp["d_model"]
    need(hp["d_embed"] in (None, d_model), f"d_embed {hp['d_embed']} != d_model {d_model}: txl's adaptive input is d_model wide")
    cutoffs = list(hp["cutoffs"])
    need(all(0 < c < hp["n_token"] for c in cutoffs), f"cutoffs {cutoffs} must lie inside (0, n_token {hp['n_token']})")
    tie_projs = list(hp["tie_projs"]) + [False] * (len(cutoffs) + 1 - len(hp["tie_projs"]))
    # txl ties every tail projection or none, and never the head's: other patterns are imported
    # untied, each projection its own copy (the same numbers).
    tails = tie_projs[1:len(cutoffs) + 1]
    clamp_len = hp["clamp_len"]
    if clamp_len <= 0:
        notes.append(f"clamp_len {clamp_len} (the paper code's no clamp) -> -1 (txl's no clamp)")
    if hp["pre_lnorm"]:
        notes.append("pre_lnorm -> pre_norm: true, final_norm: false (no LayerNorm after the last layer)")
    ext_len = hp["ext_len"] or 0
    if ext_len > 0:
        notes.append(f"ext_len {ext_len}: txl's memory ends ext_len tokens before the segment's end as "
                     "intended; the paper code passes qlen and mlen to _update_mems swapped, so its "
                     "memory differs from txl's")
    model = {
        "attn_type": "xl", "n_layer": hp["n_layer"], "d_model": d_model, "n_head": hp["n_head"],
        "d_head": hp["d_head"], "d_inner": hp["d_inner"], "dropout": float(hp["dropout"]),
        "dropatt": float(hp["dropatt"]), "tgt_len": hp["tgt_len"] or 128, "mem_len": hp["mem_len"] or 0,
        "ext_len": ext_len, "clamp_len": clamp_len if clamp_len > 0 else -1,
        "same_length": bool(hp["same_length"]), "pre_norm": bool(hp["pre_lnorm"]),
        "final_norm": False, "untie_r": bool(hp.get("untie_r", False)), "cutoffs": cutoffs, "div_val": hp["div_val"],
        "tie_weight": bool(hp["tie_weight"]), "tie_projs": all(tails) if cutoffs else True,
        "mem_init": "empty",
    }
    return model, notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--hparams", required=True)
    vocab = parser.add_mutually_exclusive_group(required=True)
    vocab.add_argument("--vocab")
    vocab.add_argument("--vocab-from-corpus")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        with open(args.hparams, encoding="utf-8") as f:
            hp = json.load(f)
        state = ti.read_weights(args.weights)
        ti.check_finite(state, args.weights)
        # The paper's PyTorch code shares u and v; its TensorFlow code and forks have untie_r:
        # per-layer biases in the state_dict say which.
        hp.setdefault("untie_r", any(k.endswith("dec_attn.r_w_bias") for k in state))
        model, notes = model_config(hp, args.hparams)
        words, counts = ti.vocab_from_file(args.vocab) if args.vocab else ti.vocab_from_corpus(args.vocab_from_corpus)
        if len(words) != hp["n_token"]:
            raise ti.InteropError(f"{args.vocab or args.vocab_from_corpus}: {len(words)} symbols, the model has n_token {hp['n_token']}")
        state = ti.fill_tied(state, model, "paper")
        tensors = ti.to_txl(state, model, "paper", args.weights)
        sections = {"run": {"name": "imported_paper"},
                    "data": {"corpus": "wikitext", "tokenizer": {"type": "word"}},
                    "model": {k: v for k, v in model.items() if k != "final_norm" or model["pre_norm"]}}
        ti.write_checkpoint(args.out, sections, words, tensors, counts)
    except (ti.InteropError, OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {args.out}: {len(tensors)} tensors, vocabulary of {len(words)} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
