#!/usr/bin/env python3
"""Weights holding NaN or Inf are refused, each by the tensor's name, with exit status 1 and no
file written: by tools/import_hf.py and tools/import_paper.py (a state_dict, and a safetensors
file), and by tools/export.py (a txl checkpoint). Each case has its control: the same input
without the NaN or Inf goes through. The tools' main(argv) run in this process (one torch start,
a few seconds in all). Needs only torch; no txl program.

usage: non_finite.py. Exit 0 pass, 1 fail, 77 skip.
"""
import contextlib
import importlib
import io
import json
import os
import sys
import tempfile

import common

import refusals
from refusals import small_hf_state

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
WORDS = ["<eos>", "a", "b", "<unk>", "c", "d"]


def tool(name, *args):
    """(exit status, stdout + stderr) of tools/<name>.py's main(args), run in this process."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
        try:
            rc = importlib.import_module(name).main(list(args))
        except SystemExit as e:  # argparse's bad usage
            rc = e.code
    return rc, text.getvalue()


def import_hf(folder, state, config, torch):
    return refusals.import_hf(folder, state, config, WORDS, torch, run=tool)


def import_paper(folder, state, config, torch, weights="w.pt"):
    """tools/import_paper.py of the HF-named state under the paper's names (no "transformer.")."""
    import txl_interop as ti
    paper = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in state.items()}
    path = os.path.join(folder, weights)
    if weights.endswith(".safetensors"):
        ti.write_atomic(path, ti.safetensors_bytes(sorted(paper.items())))
    else:
        torch.save(paper, path)
    hparams = dict(n_token=config["vocab_size"], n_layer=1, n_head=config["n_head"], d_model=config["d_model"],
                   d_head=config["d_head"], d_inner=config["d_inner"], tgt_len=4, mem_len=4)
    with open(os.path.join(folder, "hparams.json"), "w") as f:
        json.dump(hparams, f)
    vocab, out = refusals.inputs_for(folder, WORDS, "paper.safetensors")
    rc, text = tool("import_paper", "--weights", path, "--hparams", os.path.join(folder, "hparams.json"),
                    "--vocab", vocab, "--out", out)
    return rc, text, os.path.exists(out)


def rewrite_checkpoint(source, out, change=None):
    """A copy of the txl checkpoint `source` written by txl_interop's safetensors writer, with
    change(model tensors) applied first and the checksum recomputed (as txl writes one)."""
    import torch
    import txl_interop as ti
    record, model, tokenizer = ti.read_checkpoint(source)
    model = {name: t.clone() for name, t in model.items()}
    if change:
        change(model)
    tensors = [("model/" + name, t) for name, t in model.items()]
    tensors.append(("tokenizer", torch.frombuffer(bytearray(tokenizer), dtype=torch.uint8)))
    text = json.dumps(record)
    metadata = {"format": ti.FORMAT, "version": str(ti.VERSION), "record": text, "sha256": ti.checksum(text, tensors)}
    ti.write_atomic(out, ti.safetensors_bytes(tensors, metadata))
    return out


def export(checkpoint, folder, flavour):
    rc, text = tool("export", checkpoint, "--to", flavour, "--out", folder)
    return rc, text, os.path.isdir(folder) and bool(os.listdir(folder))


def poisoned(state, name, value, index=0):
    t = state[name].clone()
    t.view(-1)[index] = value
    return dict(state, **{name: t})


def check(label, result, refused, name=None):
    rc, text, written = result
    if refused:
        good = rc == 1 and not written and name in text and "not finite" in text
    else:
        good = rc == 0 and written
    print(f"{label}: {'refused, naming ' + name if refused else 'accepted'}: {good}" + ("" if good else f"\n{text}"))
    return good


def importer_cases(folder, torch):
    nan, inf = float("nan"), float("inf")
    state, config = small_hf_state(torch)
    fc1 = "transformer.layers.0.pos_ff.CoreNet.0.weight"
    emb = "transformer.word_emb.emb_layers.0.weight"
    ok = check("import_hf, control", import_hf(folder, state, config, torch), False)
    ok &= check("import_hf, a NaN", import_hf(folder, poisoned(state, fc1, nan, 5), config, torch), True, fc1)
    ok &= check("import_hf, an Inf", import_hf(folder, poisoned(state, "transformer.r_w_bias", -inf), config, torch),
                True, "transformer.r_w_bias")
    # A NaN in a tied table and its copy: named as not finite (NaN != NaN would call them different).
    tied = poisoned(state, emb, nan)
    tied["crit.out_layers.0.weight"] = tied[emb].clone()
    ok &= check("import_hf, a NaN in a tied table", import_hf(folder, tied, config, torch), True, emb)
    ok &= check("import_paper, control", import_paper(folder, state, config, torch), False)
    ok &= check("import_paper, a NaN", import_paper(folder, poisoned(state, fc1, nan, 3), config, torch), True,
                fc1[len("transformer."):])
    half = {k: v.to(torch.bfloat16) for k, v in state.items() if k != "transformer.pos_emb.inv_freq"}
    ok &= check("import_paper, bfloat16 safetensors, control",
                import_paper(folder, half, config, torch, "w.safetensors"), False)
    ok &= check("import_paper, bfloat16 safetensors, an Inf",
                import_paper(folder, poisoned(half, "transformer.r_r_bias", inf, 2), config, torch, "w.safetensors"),
                True, "r_r_bias")
    return ok


def export_cases(folder, torch):
    """A txl checkpoint (tools/import_hf.py of the valid state), copied with and without a NaN."""
    state, config = small_hf_state(torch)
    rc, text, written = import_hf(folder, state, config, torch)
    if rc != 0 or not written:
        print(f"the txl checkpoint to export could not be made:\n{text}")
        return False
    original = os.path.join(folder, "out.safetensors")
    control = rewrite_checkpoint(original, os.path.join(folder, "control.safetensors"))
    qkv = "layers.0.attn.qkv.weight"

    def nan(model):
        model[qkv].view(-1)[7] = float("nan")

    def inf(model):
        model["crit.out_layers.0.bias"].view(-1)[0] = float("inf")

    bad_nan = rewrite_checkpoint(original, os.path.join(folder, "nan.safetensors"), nan)
    bad_inf = rewrite_checkpoint(original, os.path.join(folder, "inf.safetensors"), inf)
    ok = True
    for flavour in ("paper", "hf"):
        ok &= check(f"export --to {flavour}, control", export(control, os.path.join(folder, f"c_{flavour}"), flavour), False)
        ok &= check(f"export --to {flavour}, a NaN", export(bad_nan, os.path.join(folder, f"n_{flavour}"), flavour), True, qkv)
        ok &= check(f"export --to {flavour}, an Inf", export(bad_inf, os.path.join(folder, f"i_{flavour}"), flavour), True,
                    "crit.out_layers.0.bias")
    return ok


def main():
    if common.skip_without("torch"):
        return 77
    import torch
    sys.path.insert(0, TOOLS)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        ok = importer_cases(folder, torch)
        ok = export_cases(folder, torch) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
