"""Helpers shared by the interop tests: running txl's programs and reading their per-token losses."""
import importlib
import os
import subprocess

# The Debian package of each module the interop tests need.
DEBIAN = {"torch": "python3-torch", "numpy": "python3-numpy"}


def skip_without(*modules):
    """True, after a SKIP line naming it, when this Python cannot import one of `modules` (the test
    then exits 77, ctest's skip)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            print(f"SKIP: this Python has no {name} (Debian: {DEBIAN.get(name, name)})")
            return True
    return False

# A tiny txl run on the synthetic corpus with a word tokenizer: a few steps are enough to give
# weights that are txl's own (trained, not drawn).
TINY = ["run.seed=3", "run.threads=1", "data.corpus=synthetic", "data.tokenizer.type=word",
        "data.synthetic.documents=40", "data.synthetic.gap=8", "model.n_layer=2", "model.d_model=32",
        "model.n_head=2", "model.d_head=8", "model.d_inner=48", "model.tgt_len=8", "model.mem_len=8",
        "model.dropout=0.0", "train.max_steps=3", "train.batch_size=2", "train.eval_interval=0",
        "train.eval_max_tokens=64", "eval.splits=[valid]", "eval.max_tokens=64"]


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def train(txl_train, settings, folder):
    """txl-train of TINY + settings into folder; the path of its last checkpoint."""
    out = os.path.join(folder, "run")
    os.makedirs(folder, exist_ok=True)
    config = os.path.join(folder, "tiny.yaml")
    with open(config, "w") as f:
        f.write("run: {name: interop}\n")
    sets = TINY + settings + [f"run.output_dir={out}", f"data.cache_dir={folder}/cache"]
    rc, text = run([txl_train, "--config", config] + [x for s in sets for x in ("--set", s)])
    if rc != 0:
        raise RuntimeError(text)
    return os.path.join(out, "checkpoint_last.safetensors")


def txl_losses(txl_eval, checkpoint, text, folder, tgt_len, mem_len, *extra):
    """txl-eval's per-token losses of the text file, one stream (batch 1), in text order."""
    import numpy
    losses = os.path.join(folder, "losses.npy")
    rc, out = run([txl_eval, checkpoint, "--file", text, "--token-losses", losses, "--batch-size", "1",
                   "--tgt-len", str(tgt_len), "--mem-len", str(mem_len), "--threads", "1", *extra])
    if rc != 0:
        raise RuntimeError(out)
    return numpy.load(losses)


def word_text(words, ids, path):
    """The words of `ids` on one line (txl-eval adds <eos> at its end)."""
    with open(path, "w") as f:
        f.write(" ".join(words[i] for i in ids) + "\n")
    return path
