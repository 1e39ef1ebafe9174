#!/usr/bin/env python3
"""Cross-check of tools/import_paper.py: a state_dict of the paper code's model layout
(tests/interop/paper_model.py, saved with torch.save as the paper code's model.state_dict()
would be), imported into txl, gives the paper model's per-token losses over 3 segments with
memory to 1e-5 (fp32), for an adaptive pre-norm model (div_val 2, tied tail projections,
same_length, the paper's clamp_len 0 = no clamp) and a plain post-norm one with an untied output
table and clamp_len 5. Controls that the check can fail: txl's final LayerNorm (final_norm: true)
or a clamp of 0 changes the numbers, and a state_dict entry without a txl counterpart is refused
by name.

usage: paper_cross_check.py --txl-eval build/bin/txl-eval. Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import sys
import tempfile

import common
from common import run

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
TOLERANCE = 1e-5
TGT_LEN, MEM_LEN, SEGMENTS = 6, 8, 3

CASES = {
    "adaptive_prenorm": dict(n_token=50, n_layer=2, n_head=4, d_model=32, d_head=8, d_inner=40,
                             cutoffs=[10, 25], div_val=2, tie_projs=[False, True, True], tie_weight=True,
                             pre_lnorm=True, same_length=True, clamp_len=0),
    "plain_postnorm": dict(n_token=30, n_layer=3, n_head=2, d_model=16, d_head=8, d_inner=24, cutoffs=[],
                           div_val=1, tie_projs=[False], tie_weight=False, pre_lnorm=False,
                           same_length=False, clamp_len=5),
}


def vocabulary(n):
    words = ["<eos>"] + [f"w{i}" for i in range(1, n)]
    words[3] = "<unk>"
    return words


def txl_losses(txl_eval, checkpoint, text, folder, *extra):
    return common.txl_losses(txl_eval, checkpoint, text, folder, TGT_LEN, MEM_LEN, *extra)


def reference(case, seed, folder):
    """The paper-layout model with random weights, saved; and its per-token losses."""
    import torch
    import paper_model
    torch.manual_seed(seed)
    hp = dict(CASES[case], tgt_len=TGT_LEN, mem_len=MEM_LEN, ext_len=0, dropout=0.0, dropatt=0.0,
              d_embed=CASES[case]["d_model"], attn_type=0, sample_softmax=-1)
    model = paper_model.MemTransformerLM(**hp).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Moderate weights: the losses stay near ln(n_token), where fp32 resolves 1e-6.
            p.copy_(1 + 0.2 * torch.randn_like(p) if "layer_norm.weight" in name else 0.15 * torch.randn_like(p))
    # What a user of the paper's code runs to hand its weights over: a few lines of PyTorch.
    torch.save(model.state_dict(), os.path.join(folder, "state_dict.pt"))
    with open(os.path.join(folder, "hparams.json"), "w") as f:
        json.dump(hp, f)
    words = vocabulary(hp["n_token"])
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
    ids = torch.randint(4, hp["n_token"], (SEGMENTS * TGT_LEN,), generator=torch.Generator().manual_seed(3))
    with open(os.path.join(folder, "text.txt"), "w") as f:
        f.write(" ".join(words[i] for i in ids.tolist()) + "\n")
    ids = torch.cat([ids, torch.tensor([0])])  # txl-eval adds <eos> at the end of the line
    nll, mems = [], model.init_mems()
    with torch.no_grad():
        for s in range(SEGMENTS):
            x = ids[s * TGT_LEN:(s + 1) * TGT_LEN, None]            # [Q, 1]
            y = ids[s * TGT_LEN + 1:(s + 1) * TGT_LEN + 1, None]    # [Q, 1]
            loss, mems = model(x, y, mems)
            nll.append(loss[:, 0])
    return torch.cat(nll).numpy(), model


def import_paper(folder, out, *extra):
    return run([sys.executable, os.path.join(TOOLS, "import_paper.py"), "--weights",
                os.path.join(folder, "state_dict.pt"), "--hparams", os.path.join(folder, "hparams.json"),
                "--vocab", os.path.join(folder, "vocab.txt"), "--out", out, *extra])


def check(case, txl_eval, folder):
    import numpy
    import torch
    import txl_interop as ti
    expected, model = reference(case, 5, folder)
    checkpoint = os.path.join(folder, "imported.safetensors")
    rc, out = import_paper(folder, checkpoint)
    if rc != 0:
        print(out)
        return False
    text = os.path.join(folder, "text.txt")
    got = txl_losses(txl_eval, checkpoint, text, folder)
    worst = float(numpy.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
    print(f"{case}: {len(got)} tokens, max |txl - paper| per-token loss = {worst:.3e} (tolerance {TOLERANCE:.0e})")
    ok = worst <= TOLERANCE
    record, tensors, _ = ti.read_checkpoint(checkpoint)
    section = ti.parse_model_section(record["config"])
    if case == "adaptive_prenorm":
        # Controls: txl's own pre-norm (a final LayerNorm, here the identity's neighbour) and a
        # literal clamp of 1 each change the numbers.
        tensors["final_norm.weight"] = torch.ones(section["d_model"])
        tensors["final_norm.bias"] = torch.zeros(section["d_model"])
        with_norm = os.path.join(folder, "with_final_norm.safetensors")
        ti.write_checkpoint(with_norm, {"data": {"tokenizer": {"type": "word"}},
                                        "model": dict(section, final_norm=True)},
                            vocabulary(50), tensors)
        gap = float(numpy.abs(txl_losses(txl_eval, with_norm, text, folder) - expected).max())
        clamped = float(numpy.abs(txl_losses(txl_eval, checkpoint, text, folder, "--clamp-len", "1") - expected).max())
        print(f"{case}: with txl's final LayerNorm the losses differ by {gap:.3e}; clamped at 1 by {clamped:.3e}")
        ok = ok and gap > 1e-3 and clamped > 1e-3 and section["clamp_len"] == -1
        rc, out = run([txl_eval, checkpoint, "--file", text, "--clamp-len", "0"])
        ok = ok and rc != 0 and "no clamp, which is -1 here" in out
    else:
        state = torch.load(os.path.join(folder, "state_dict.pt"))
        state["layers.1.dec_attn.extra_gate"] = torch.zeros(3)
        torch.save(state, os.path.join(folder, "state_dict.pt"))
        rc, out = import_paper(folder, os.path.join(folder, "refused.safetensors"))
        refused = rc == 1 and "layers.1.dec_attn.extra_gate: no txl counterpart" in out
        print(f"{case}: an unknown parameter is refused by name: {refused}")
        ok = ok and refused and not os.path.exists(os.path.join(folder, "refused.safetensors"))
    return ok


def check_export(txl_train, txl_eval, folder):
    """The other way: a model trained by txl (pre-norm without the final LayerNorm, adaptive),
    exported with tools/export.py --to paper, loaded strictly into the paper-layout model from
    its hparams.json, gives txl's per-token losses."""
    import numpy
    import torch
    import paper_model
    checkpoint = common.train(txl_train, ["model.pre_norm=true", "model.final_norm=false", "model.cutoffs=[8, 20]",
                                          "model.div_val=2", "model.same_length=true",
                                          f"model.tgt_len={TGT_LEN}", f"model.mem_len={MEM_LEN}"], folder)
    exported = os.path.join(folder, "paper")
    rc, out = run([sys.executable, os.path.join(TOOLS, "export.py"), checkpoint, "--to", "paper", "--out", exported])
    if rc != 0:
        print(out)
        return False
    with open(os.path.join(exported, "hparams.json")) as f:
        model = paper_model.MemTransformerLM(**json.load(f)).eval()
    model.load_state_dict(torch.load(os.path.join(exported, "state_dict.pt"), weights_only=True), strict=True)
    with open(os.path.join(exported, "vocab.txt")) as f:
        words = [line.split("\t")[0] for line in f.read().splitlines()]
    ids = torch.randint(3, len(words), (SEGMENTS * TGT_LEN,), generator=torch.Generator().manual_seed(5))
    text = common.word_text(words, ids.tolist(), os.path.join(folder, "text.txt"))
    ids = torch.cat([ids, torch.tensor([words.index("<eos>")])])
    expected, mems = [], model.init_mems()
    with torch.no_grad():
        for s in range(SEGMENTS):
            loss, mems = model(ids[s * TGT_LEN:(s + 1) * TGT_LEN, None], ids[s * TGT_LEN + 1:(s + 1) * TGT_LEN + 1, None], mems)
            expected.append(loss[:, 0])
    expected = torch.cat(expected).numpy()
    got = txl_losses(txl_eval, checkpoint, text, folder)
    worst = float(numpy.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
    print(f"txl-trained -> export --to paper -> paper model: {len(got)} tokens, max |txl - paper| per-token "
          f"loss = {worst:.3e} (tolerance {TOLERANCE:.0e})")
    return worst <= TOLERANCE


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txl-eval", required=True)
    parser.add_argument("--txl-train", required=True)
    args = parser.parse_args()
    if common.skip_without("numpy", "torch"):
        return 77
    sys.path.insert(0, TOOLS)
    sys.path.insert(0, HERE)
    ok = True
    for case in CASES:
        with tempfile.TemporaryDirectory() as folder:
            ok = check(case, args.txl_eval, folder) and ok
    with tempfile.TemporaryDirectory() as folder:
        ok = check_export(args.txl_train, args.txl_eval, folder) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
