#!/usr/bin/env python3
"""What tools/import_hf.py and tools/import_paper.py refuse, each with a message naming the cause
and exit status 1 and no file written; and the paper code's vocabulary rule of
--vocab-from-corpus. Needs only torch (Debian's python3-torch); no txl program.

usage: refusals.py. Exit 0 pass, 1 fail, 77 skip.
"""
import json
import os
import subprocess
import sys
import tempfile

import common

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")


def small_hf_state(torch, d=8, n_token=6, heads=2, d_head=4, d_inner=12):
    """A 1-layer HF-named state_dict (plain softmax, shared u/v) with tied output table."""
    emb = torch.randn(n_token, d)
    state = {"transformer.word_emb.emb_layers.0.weight": emb, "crit.out_layers.0.weight": emb.clone(),
             "crit.out_layers.0.bias": torch.randn(n_token), "transformer.r_w_bias": torch.randn(heads, d_head),
             "transformer.r_r_bias": torch.randn(heads, d_head),
             "transformer.pos_emb.inv_freq": 1 / (10000 ** (torch.arange(0.0, d, 2.0) / d))}
    p = "transformer.layers.0."
    state.update({p + "dec_attn.qkv_net.weight": torch.randn(3 * heads * d_head, d),
                  p + "dec_attn.o_net.weight": torch.randn(d, heads * d_head),
                  p + "dec_attn.r_net.weight": torch.randn(heads * d_head, d),
                  p + "dec_attn.layer_norm.weight": torch.ones(d), p + "dec_attn.layer_norm.bias": torch.zeros(d),
                  p + "pos_ff.CoreNet.0.weight": torch.randn(d_inner, d), p + "pos_ff.CoreNet.0.bias": torch.zeros(d_inner),
                  p + "pos_ff.CoreNet.3.weight": torch.randn(d, d_inner), p + "pos_ff.CoreNet.3.bias": torch.zeros(d),
                  p + "pos_ff.layer_norm.weight": torch.ones(d), p + "pos_ff.layer_norm.bias": torch.zeros(d)})
    config = dict(vocab_size=n_token, d_model=d, d_embed=d, n_head=heads, d_head=d_head, d_inner=d_inner,
                  n_layer=1, cutoffs=[], div_val=1, untie_r=False, tgt_len=4, mem_len=4, clamp_len=0)
    return state, config


def run_tool(name, *args):
    """(exit status, stdout + stderr) of tools/<name>.py run as a program."""
    r = subprocess.run([sys.executable, os.path.join(TOOLS, name + ".py"), *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def inputs_for(folder, words, out_name):
    """Writes folder/vocab.txt of `words` and removes an earlier output; (vocab path, output path)."""
    vocab = os.path.join(folder, "vocab.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(words) + "\n")
    out = os.path.join(folder, out_name)
    if os.path.exists(out):
        os.unlink(out)
    return vocab, out


def import_hf(folder, state, config, words, torch, run=run_tool):
    """tools/import_hf.py of `state` and `config`: (exit status, output, whether it wrote a file)."""
    torch.save(state, os.path.join(folder, "w.bin"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    vocab, out = inputs_for(folder, words, "out.safetensors")
    rc, text = run("import_hf", "--weights", os.path.join(folder, "w.bin"), "--config",
                   os.path.join(folder, "config.json"), "--vocab", vocab, "--out", out)
    return rc, text, os.path.exists(out)


def main():
    if common.skip_without("torch"):
        return 77
    import torch
    sys.path.insert(0, TOOLS)
    import txl_interop as ti
    words = ["<eos>", "a", "b", "<unk>", "c", "d"]
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        state, config = small_hf_state(torch)
        rc, out, written = import_hf(folder, state, config, words, torch)
        ok &= rc == 0 and written
        print(f"a valid 1-layer model imports: {rc == 0 and written}")
        cases = {
            "attn_type 1": (state, dict(config, attn_type=1), words, "attn_type 1: only 0"),
            "d_embed != d_model": (state, dict(config, d_embed=4), words, "d_embed 4 != d_model 8"),
            "vocabulary size": (state, config, words[:5], "5 symbols, the model has vocab_size 6"),
            "no <unk>": (state, config, ["<eos>", "a", "b", "x", "c", "d"], "must hold <unk> and <eos>"),
            "tied copy differs": (dict(state, **{"crit.out_layers.0.weight": torch.zeros(6, 8)}), config, words,
                                  "crit.out_layers.0.weight: tied to transformer.word_emb.emb_layers.0.weight"),
            "missing": ({k: v for k, v in state.items() if "o_net" not in k}, config, words,
                        "transformer.layers.0.dec_attn.o_net.weight: missing"),
            "unknown": (dict(state, **{"transformer.extra": torch.zeros(2)}), config, words,
                        "transformer.extra: no txl counterpart"),
            "inv_freq": (dict(state, **{"transformer.pos_emb.inv_freq": torch.ones(4)}), config, words,
                         "not the sinusoid frequencies"),
        }
        for name, (s, c, w, expected) in cases.items():
            rc, out, written = import_hf(folder, s, c, w, torch)
            good = rc == 1 and expected in out and not written
            print(f"refused, {name}: {good}" + ("" if good else f"\n{out}"))
            ok &= good
        # The paper code's Vocab: specials first, then by count, ties in order of first appearance.
        corpus = os.path.join(folder, "train.txt")
        with open(corpus, "w") as f:
            f.write("b a c\n\n a b  z <unk>\n")
        got, counts = ti.vocab_from_corpus(corpus)
        expected = ["<eos>", "b", "a", "c", "z", "<unk>"]
        print(f"vocab_from_corpus: {got} counts {counts}")
        ok &= got == expected and counts == [3, 2, 2, 1, 1, 1]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
