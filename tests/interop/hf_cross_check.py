#!/usr/bin/env python3
"""Cross-check of tools/import_hf.py against Hugging Face's own TransfoXLLMHeadModel (transformers
from PyPI, tools/requirements.txt).

A small TransfoXLLMHeadModel with random weights (every parameter, biases and LayerNorms
included, drawn away from its initial value) is saved as HF saves it, imported into a txl
checkpoint, and evaluated by txl-eval --token-losses over 3 segments with memory (batch 1). The
per-token log-probabilities must equal HF's, segment by segment with HF's own memory, to 1e-5
(fp32), for a plain softmax (pre-norm, shared u/v, no same_length) and an adaptive one (div_val
4, 3 tail clusters, untied u/v, tied tail projections, same_length, clamp_len below the
attention length). As controls that the check can fail: the same checkpoint with txl's empty
memory start (--mem-init empty) must differ from HF, and so must the unflipped cluster logits.

usage: hf_cross_check.py --txl-eval build/bin/txl-eval [--python build/venv/bin/python]
Exit 0 pass, 1 fail, 77 skip (no transformers).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import common

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
SKIP = 77
TOLERANCE = 1e-5

CASES = {
    "plain": dict(vocab_size=37, cutoffs=[], div_val=1, d_model=32, d_embed=32, n_head=4, d_head=6,
                  d_inner=40, n_layer=3, pre_lnorm=True, untie_r=False, same_length=False,
                  clamp_len=0, proj_share_all_but_first=False),
    "adaptive": dict(vocab_size=60, cutoffs=[10, 20, 40], div_val=4, d_model=64, d_embed=64,
                     n_head=4, d_head=8, d_inner=48, n_layer=2, pre_lnorm=False, untie_r=True,
                     same_length=True, clamp_len=9, proj_share_all_but_first=True),
}
TGT_LEN, MEM_LEN, SEGMENTS = 6, 8, 3


def reexec_with(python):
    """Run under `python` (the build's virtual environment) when this one lacks transformers."""
    problem = None
    try:
        from transformers import TransfoXLLMHeadModel  # noqa: F401
        return
    except Exception as e:  # absent, or a release that does not run with this torch
        problem = f"{type(e).__name__}: {e}"
    # (A virtual environment's python is a link to the system's: compare nothing but the guard.)
    if python and os.path.exists(python) and os.environ.get("TXL_HF_REEXEC") != "1":
        os.environ["TXL_HF_REEXEC"] = "1"
        os.execv(python, [python] + sys.argv)
    print(f"SKIP: no Python with a working transformers ({problem}; tools/setup.sh installs "
          "transformers from tools/requirements.txt into build/venv where PyPI is reachable)")
    sys.exit(SKIP)


def vocabulary(n):
    """HF's layout: <eos> first, <unk> where its count put it, no <pad>."""
    words = ["<eos>"] + [f"w{i}" for i in range(1, n)]
    words[4] = "<unk>"
    return words


def random_model(case, seed):
    import torch
    from transformers import TransfoXLConfig, TransfoXLLMHeadModel
    torch.manual_seed(seed)
    config = TransfoXLConfig(tgt_len=TGT_LEN, mem_len=MEM_LEN, dropout=0.0, dropatt=0.0,
                             eos_token_id=0, **CASES[case])
    model = TransfoXLLMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied tensors are listed once
            if "layer_norm.weight" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                # Moderate weights: the losses stay near ln(vocab_size), where fp32 resolves 1e-6.
                p.copy_(0.15 * torch.randn_like(p))
    return model


def hf_log_probs(model, ids):
    """log p(ids[t+1] | ids[..t]) over SEGMENTS segments of TGT_LEN, HF's memory carried."""
    import torch
    out, mems = [], None
    with torch.no_grad():
        for s in range(SEGMENTS):
            x = ids[s * TGT_LEN:(s + 1) * TGT_LEN].unsqueeze(0)           # [1, Q]
            y = ids[s * TGT_LEN + 1:(s + 1) * TGT_LEN + 1]                  # [Q]
            result = model(input_ids=x, mems=mems)
            mems = result.mems
            logp = result.prediction_scores[0]                              # [Q, V]
            out.append(logp.gather(1, y.unsqueeze(1)).squeeze(1))
    return torch.cat(out)


def save_hf(model, folder, as_safetensors):
    """As HF saves a model: config.json, and the weights as a state_dict (tied tensors under both
    names) or as safetensors (tied copies left out)."""
    import torch
    import txl_interop as ti
    model.config.to_json_file(os.path.join(folder, "config.json"))
    state = model.state_dict()
    if not as_safetensors:
        path = os.path.join(folder, "pytorch_model.bin")
        torch.save(state, path)
        return path
    seen, tensors = set(), []
    for name, t in state.items():
        key = (t.data_ptr(), tuple(t.shape))
        if key not in seen:
            seen.add(key)
            tensors.append((name, t))
    path = os.path.join(folder, "model.safetensors")
    ti.write_atomic(path, ti.safetensors_bytes(tensors, {"format": "pt"}))
    return path


def txl_losses(txl_eval, checkpoint, text, folder, *extra):
    return common.txl_losses(txl_eval, checkpoint, text, folder, TGT_LEN, MEM_LEN, *extra)


def check(case, txl_eval, folder):
    import numpy
    import torch
    import txl_interop as ti
    model = random_model(case, seed=7 if case == "plain" else 8)
    words = vocabulary(model.config.vocab_size)
    weights = save_hf(model, folder, as_safetensors=(case == "adaptive"))
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
    checkpoint = os.path.join(folder, f"{case}.safetensors")
    subprocess.run([sys.executable, os.path.join(TOOLS, "import_hf.py"), "--weights", weights,
                    "--config", os.path.join(folder, "config.json"), "--vocab",
                    os.path.join(folder, "vocab.txt"), "--out", checkpoint], check=True)
    # Text of SEGMENTS * TGT_LEN words (never a special); txl-eval adds <eos> at the line's end.
    generator = torch.Generator().manual_seed(11)
    ids = torch.randint(5, len(words), (SEGMENTS * TGT_LEN,), generator=generator)
    text = os.path.join(folder, "text.txt")
    with open(text, "w") as f:
        f.write(" ".join(words[i] for i in ids.tolist()) + "\n")
    ids = torch.cat([ids, torch.tensor([0])])
    reference = hf_log_probs(model, ids).numpy()
    got = -txl_losses(txl_eval, checkpoint, text, folder)
    worst = float(numpy.abs(got - reference).max()) if got.shape == reference.shape else float("inf")
    empty = -txl_losses(txl_eval, checkpoint, text, folder, "--mem-init", "empty")
    first_gap = float(numpy.abs(empty[:TGT_LEN] - reference[:TGT_LEN]).max())
    print(f"{case}: {len(got)} tokens, max |txl - HF| log-prob = {worst:.3e} (tolerance {TOLERANCE:.0e}); "
          f"txl's empty memory start differs from HF's zeros by {first_gap:.3e} in segment 1")
    ok = worst <= TOLERANCE and first_gap > 1e-3
    if case == "adaptive":  # the control: without the flip the tail clusters' logits are swapped
        record, tensors, tokenizer = ti.read_checkpoint(checkpoint)
        tensors["crit.cluster_weight"] = tensors["crit.cluster_weight"].flip(0).contiguous()
        tensors["crit.cluster_bias"] = tensors["crit.cluster_bias"].flip(0).contiguous()
        model_section = ti.parse_model_section(record["config"])
        unflipped = os.path.join(folder, "unflipped.safetensors")
        ti.write_checkpoint(unflipped, {"data": {"tokenizer": {"type": "word"}},
                                        "model": {k: v for k, v in model_section.items() if k != "final_norm"}},
                            words, tensors)
        gap = float(numpy.abs(-txl_losses(txl_eval, unflipped, text, folder) - reference).max())
        print(f"{case}: with HF's cluster order unconverted the log-probs differ by {gap:.3e}")
        ok = ok and gap > 1e-3
    return ok


def check_export(txl_train, txl_eval, folder):
    """The other way: a model trained by txl, exported with tools/export.py --to hf, loaded by
    TransfoXLLMHeadModel.from_pretrained, gives txl's log-probabilities (trained with HF's zero
    memory start, so that the first segment agrees too)."""
    import numpy
    import torch
    from transformers import TransfoXLLMHeadModel
    checkpoint = common.train(txl_train, ["model.cutoffs=[8, 20]", "model.div_val=2", "model.untie_r=true",
                                          "model.mem_init=zeros", "model.clamp_len=5", "model.same_length=true",
                                          f"model.tgt_len={TGT_LEN}", f"model.mem_len={MEM_LEN}"], folder)
    exported = os.path.join(folder, "hf")
    rc, out = common.run([sys.executable, os.path.join(TOOLS, "export.py"), checkpoint, "--to", "hf", "--out", exported])
    if rc != 0:
        print(out)
        return False
    model = TransfoXLLMHeadModel.from_pretrained(exported).eval()
    with open(os.path.join(exported, "vocab.txt")) as f:
        words = [line.split("\t")[0] for line in f.read().splitlines()]
    ids = torch.randint(3, len(words), (SEGMENTS * TGT_LEN,), generator=torch.Generator().manual_seed(5))
    text = common.word_text(words, ids.tolist(), os.path.join(folder, "text.txt"))
    reference = hf_log_probs(model, torch.cat([ids, torch.tensor([words.index("<eos>")])])).numpy()
    got = -txl_losses(txl_eval, checkpoint, text, folder)
    worst = float(numpy.abs(got - reference).max()) if got.shape == reference.shape else float("inf")
    print(f"txl-trained -> export --to hf -> transformers: {len(got)} tokens, max |txl - HF| log-prob = "
          f"{worst:.3e} (tolerance {TOLERANCE:.0e})")
    return worst <= TOLERANCE


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txl-eval", required=True)
    parser.add_argument("--txl-train", required=True)
    parser.add_argument("--python", default="")
    args = parser.parse_args()
    reexec_with(args.python)
    sys.path.insert(0, TOOLS)
    import transformers
    print(f"transformers {transformers.__version__}")
    ok = True
    for case in CASES:
        with tempfile.TemporaryDirectory() as folder:
            ok = check(case, args.txl_eval, folder) and ok
    with tempfile.TemporaryDirectory() as folder:
        ok = check_export(args.txl_train, args.txl_eval, folder) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
