#!/usr/bin/env python3
"""A txl checkpoint -> weights under the Transformer-XL paper code's names (MemTransformerLM) or
Hugging Face's (TransfoXLLMHeadModel), so that a model trained by txl runs in either.

usage: tools/export.py CHECKPOINT --to paper|hf --out FOLDER

--to paper  FOLDER/state_dict.pt (model.load_state_dict(torch.load(...)) in the paper's code),
            FOLDER/hparams.json (MemTransformerLM's constructor arguments), and the tokenizer
--to hf     FOLDER/pytorch_model.bin and FOLDER/config.json
            (TransfoXLLMHeadModel.from_pretrained(FOLDER)), and the tokenizer

The weights are plain tensors (torch.save of a dict of tensors; torch.load(weights_only=True)
reads them), tied copies included under every name the reference's own state_dict lists.
The tokenizer, by the checkpoint's kind: a word tokenizer as FOLDER/vocab.txt ("symbol<TAB>count"
lines in id order; the paper code's Vocab and tools/import_*.py --vocab read the first field); a
sentencepiece tokenizer as FOLDER/tokenizer.model, the sentencepiece model's bytes as the
checkpoint stores them (sentencepiece.SentencePieceProcessor(model_file=...) loads it; ids pad 0,
unk 1, eos 2; neither reference has a word vocabulary that can hold it); a byte tokenizer as
nothing (its ids are the bytes, then pad 256, eos 257). config.json's eos_token_id is the
tokenizer's <eos> id. Refused: a model the references cannot run (attn_type other than xl;
pre-norm with txl's final LayerNorm) and weights holding NaN or Inf (named). clamp_len -1 (txl's
no clamp) is written as 0 (theirs). Notes say where the references' numbers will differ from
txl's (memory start, ext_len).
Exit status 0 on success, 1 on a user error (with a message), 2 on bad usage.
"""
import argparse
import json
import os
import sys

import torch

import txl_interop as ti


def paper_hparams(m, n_token):
    return {
        "n_token": n_token, "n_layer": m["n_layer"], "n_head": m["n_head"], "d_model": m["d_model"],
        "d_head": m["d_head"], "d_inner": m["d_inner"], "dropout": m["dropout"], "dropatt": m["dropatt"],
        "tie_weight": m["tie_weight"], "d_embed": m["d_model"], "div_val": m["div_val"],
        "tie_projs": [False] + [bool(m["tie_projs"])] * len(m["cutoffs"]), "pre_lnorm": m["pre_norm"],
        "untie_r": m["untie_r"],
        "tgt_len": m["tgt_len"], "ext_len": m["ext_len"], "mem_len": m["mem_len"], "cutoffs": m["cutoffs"],
        "same_length": m["same_length"], "attn_type": 0,
        "clamp_len": m["clamp_len"] if m["clamp_len"] > 0 else 0, "sample_softmax": -1,
    }


def hf_config(m, n_token, eos_id):
    return {
        "architectures": ["TransfoXLLMHeadModel"], "model_type": "transfo-xl",
        "vocab_size": n_token, "cutoffs": m["cutoffs"], "d_model": m["d_model"], "d_embed": m["d_model"],
        "n_head": m["n_head"], "d_head": m["d_head"], "d_inner": m["d_inner"], "div_val": m["div_val"],
        "pre_lnorm": m["pre_norm"], "n_layer": m["n_layer"], "mem_len": m["mem_len"],
        "tgt_len": m["tgt_len"], "ext_len": m["ext_len"],
        "clamp_len": m["clamp_len"] if m["clamp_len"] > 0 else 0, "same_length": m["same_length"],
        "proj_share_all_but_first": bool(m["tie_projs"]),
        "tie_projs": [False] + [bool(m["tie_projs"])] * len(m["cutoffs"]), "attn_type": 0, "sample_softmax": -1,
        "adaptive": True, "dropout": m["dropout"], "dropatt": m["dropatt"], "untie_r": m["untie_r"],
        "init": m["init"], "init_range": m["init_std"] if m["init"] == "uniform" else 0.01,
        "proj_init_std": m["proj_init_std"],
        "init_std": m["init_std"] if m["init"] != "uniform" else 0.02, "layer_norm_epsilon": 1e-5, "eos_token_id": eos_id,
        "tie_word_embeddings": m["tie_weight"],
    }


def notes_for(m, to):
    notes = []
    if m["untie_r"] and to == "paper":
        notes.append("untie_r: the u, v biases are per layer (layers.<l>.dec_attn.r_w_bias, r_r_bias), "
                     "as the paper's TensorFlow code has them; its PyTorch MemTransformerLM shares one pair "
                     "and needs a per-layer variant to load them")
    if m["ext_len"] > 0 and to == "paper":
        notes.append(f"ext_len {m['ext_len']}: the paper code's _update_mems gets qlen and mlen swapped, "
                     "so its memory (and numbers) differ from txl's")
    if to == "hf" and m["mem_init"] != "zeros" and m["mem_len"] > 0:
        notes.append("Hugging Face's model starts every stream from mem_len zero vectors; this model "
                     "was trained from an empty memory (model.mem_init: empty): its first segment scores differ")
    if to == "paper" and m["mem_init"] == "zeros" and m["mem_len"] > 0:
        notes.append("the paper code starts from an empty memory; this model's mem_init is zeros: "
                     "its first segment scores differ")
    return notes


# txl's fixed <eos> id of the tokenizers without a vocabulary file to look it up in (data/tokenizer.cpp).
EOS_ID = {"sentencepiece": 2, "byte": 257}


def tokenizer_file(kind, blob):
    """(file name or None, its bytes, <eos> id) for the checkpoint's tokenizer bytes. Only a word
    tokenizer's are text ("word<TAB>count" lines, as txl stores them); a sentencepiece model is
    binary (a serialized ModelProto) and is written as it is."""
    if kind == "word":
        lines = blob.decode("utf-8").splitlines()
        words = [line.split("\t")[0] for line in lines]
        # The paper code's Vocab(vocab_file=...) reads the first field of each line.
        return "vocab.txt", ("\n".join(lines) + "\n").encode("utf-8"), words.index("<eos>")
    if kind == "sentencepiece":
        return "tokenizer.model", blob, EOS_ID[kind]
    if kind == "byte":
        return None, b"", EOS_ID[kind]
    raise ti.InteropError(f"unknown tokenizer kind {kind!r} (expected word, sentencepiece or byte)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--to", choices=["paper", "hf"], required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        record, tensors, tokenizer = ti.read_checkpoint(args.checkpoint)
        ti.check_finite(tensors, args.checkpoint)
        m = ti.parse_model_section(record["config"])
        state = ti.from_txl(tensors, m, args.to)
        kind = record["tokenizer"]["kind"]
        vocab, vocab_bytes, eos = tokenizer_file(kind, tokenizer)
        os.makedirs(args.out, exist_ok=True)
        n_token = record["vocab_size"]
        if args.to == "paper":
            weights, meta, body = "state_dict.pt", "hparams.json", paper_hparams(m, n_token)
        else:
            weights, meta, body = "pytorch_model.bin", "config.json", hf_config(m, n_token, eos)
        path = os.path.join(args.out, weights)
        torch.save({k: v.contiguous() for k, v in sorted(state.items())}, path + ".tmp")
        os.replace(path + ".tmp", path)
        ti.write_atomic(os.path.join(args.out, meta), (json.dumps(body, indent=2) + "\n").encode())
        if vocab:
            ti.write_atomic(os.path.join(args.out, vocab), vocab_bytes)
    except (ti.InteropError, OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for note in notes_for(m, args.to):
        print(f"note: {note}")
    if kind == "sentencepiece":
        print("note: a sentencepiece tokenizer has no word vocabulary: tokenizer.model is its sentencepiece "
              "model (load it with sentencepiece; pad 0, unk 1, eos 2)")
    elif kind != "word":
        print(f"note: a {kind} tokenizer has no vocabulary to write; only the weights")
    print(f"wrote {args.out}: {weights} ({len(state)} tensors), {meta}" + (f", {vocab}" if vocab else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
