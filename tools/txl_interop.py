"""Shared by tools/import_paper.py, tools/import_hf.py and tools/export.py: txl's checkpoint format
in Python (include/txl/models/checkpoint.h), and the parameter names of the Transformer-XL paper's
PyTorch code (MemTransformerLM) and of Hugging Face's TransfoXLLMHeadModel.

Nothing here unpickles: safetensors files are parsed by hand (an 8-byte length, a JSON header, raw
little-endian numbers), and PyTorch files are read with torch.load(weights_only=True), which
refuses anything but tensors and plain containers.
"""
import hashlib
import json
import math
import os
import re
import struct
import tempfile

import torch

FORMAT = "txl-checkpoint"
VERSION = 2

# safetensors dtype name -> (torch dtype, LibTorch's c10::toString name used in txl's checksum)
DTYPES = {
    "F64": (torch.float64, "Double"), "F32": (torch.float32, "Float"), "F16": (torch.float16, "Half"),
    "BF16": (torch.bfloat16, "BFloat16"), "I64": (torch.int64, "Long"), "I32": (torch.int32, "Int"),
    "I16": (torch.int16, "Short"), "I8": (torch.int8, "Char"), "U8": (torch.uint8, "Byte"),
    "BOOL": (torch.bool, "Bool"),
}
NAME_OF = {dtype: name for name, (dtype, _) in DTYPES.items()}


class InteropError(Exception):
    """A user error: the message names the file, parameter or setting and the fix."""


# ------------------------------------------------------------------------------ safetensors

def tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same 2 bytes as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def read_safetensors(path):
    """(list of (name, tensor) in data order, metadata dict) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise InteropError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise InteropError(f"{path}: not a safetensors file (header length {n} past the end)")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise InteropError(f"{path}: not a safetensors file (header is not JSON: {e})")
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    entries = []
    for name, e in header.items():
        if e.get("dtype") not in DTYPES:
            raise InteropError(f"{path}: tensor {name} has the unsupported dtype {e.get('dtype')}")
        begin, end = e["data_offsets"]
        dtype = DTYPES[e["dtype"]][0]
        raw = bytearray(body[begin:end])
        if dtype == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.empty(0, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        entries.append((begin, end, name, t.reshape(e["shape"]).clone()))
    entries.sort(key=lambda x: (x[0], x[1]))
    return [(name, t) for _, _, name, t in entries], metadata


def write_atomic(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-" + os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def safetensors_bytes(tensors, metadata=None):
    """The bytes of a safetensors file holding `tensors` (list of (name, tensor)) in that order."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors:
        if t.dtype not in NAME_OF:
            raise InteropError(f"tensor {name}: dtype {t.dtype} cannot be stored")
        blob = tensor_bytes(t)
        header[name] = {"dtype": NAME_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def read_weights(path):
    """{name: tensor} of a .safetensors file or a PyTorch state_dict file (weights only)."""
    if path.endswith(".safetensors"):
        return dict(read_safetensors(path)[0])
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # the loader's own message says what it refused
        raise InteropError(f"{path}: not a PyTorch file of weights only ({e})")
    if isinstance(state, dict) and "model_state_dict" in state and isinstance(state["model_state_dict"], dict):
        state = state["model_state_dict"]
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise InteropError(f"{path}: expected a state_dict (a mapping of names to tensors)")
    return dict(state)


def check_finite(tensors, origin):
    """Refuses weights that hold a NaN or an infinity, naming each such tensor of {name: tensor}
    (txl-eval refuses such a checkpoint too: it would only score NaN)."""
    problems = []
    for name, t in tensors.items():
        if t.is_floating_point():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                nan = int(torch.isnan(t).sum())
                problems.append(f"{name}: {bad} of {t.numel()} values are not finite ({nan} NaN, {bad - nan} Inf)")
    if problems:
        raise InteropError(f"{origin}: {len(problems)} tensor(s) hold NaN or Inf (a diverged or damaged "
                           "model, which txl refuses to score):\n  " + "\n  ".join(problems))


# ------------------------------------------------------------------------------ txl checkpoints

def word_fingerprint(words):
    """data::WordTokenizer's fingerprint: FNV-1a 64 over "txl-word-tokenizer-v1" and each word + newline."""
    h = 1469598103934665603
    for chunk in ["txl-word-tokenizer-v1"] + [w + "\n" for w in words]:
        for c in chunk.encode("utf-8"):
            h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def checksum(record, tensors):
    """txl's models::detail::checkpoint_checksum."""
    h = hashlib.sha256()

    def part(b):
        h.update(f"{len(b)}:".encode())
        h.update(b)

    part(f"{FORMAT} {VERSION}".encode())
    part(record.encode())
    for name, t in tensors:
        part(name.encode())
        part(DTYPES[NAME_OF[t.dtype]][1].encode())
        part("".join(f"{s}," for s in t.shape).encode())
        part(tensor_bytes(t))
    return h.hexdigest()


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) and ("." in repr(v) or "e" in repr(v)) else f"{v}.0"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))  # a double-quoted YAML string


def experiment_yaml(sections):
    """{"model": {...}, "data": {...}} -> YAML text txl's loader reads (unset keys keep txl's defaults)."""
    lines = []
    for section, fields in sections.items():
        lines.append(f"{section}:")
        for key, value in fields.items():
            if isinstance(value, dict):
                lines.append(f"  {key}:")
                lines += [f"    {k}: {yaml_value(v)}" for k, v in value.items()]
            else:
                lines.append(f"  {key}: {yaml_value(value)}")
    return "\n".join(lines) + "\n"


def check_words(words, origin):
    seen = set()
    for i, w in enumerate(words):
        if not w or any(c in w for c in " \t\r\n\v\f"):
            raise InteropError(f"{origin}: symbol {i} {w!r} is empty or holds whitespace (txl's word tokenizer splits on it)")
        if w in seen:
            raise InteropError(f"{origin}: symbol {w!r} is listed twice")
        seen.add(w)
    if "<unk>" not in seen or "<eos>" not in seen:
        raise InteropError(f"{origin}: the vocabulary must hold <unk> and <eos> (txl's word tokenizer needs both)")


def write_checkpoint(path, sections, words, model_tensors, counts=None):
    """A model-only txl checkpoint: the experiment `sections`, a word tokenizer of `words` (ids in
    list order) and model_tensors {txl name: tensor}."""
    check_words(words, path)
    counts = counts or [0] * len(words)
    tokenizer = "".join(f"{w}\t{c}\n" for w, c in zip(words, counts)).encode("utf-8")
    tensors = [("model/" + name, t.detach().cpu().contiguous()) for name, t in model_tensors.items()]
    tensors.append(("tokenizer", torch.frombuffer(bytearray(tokenizer), dtype=torch.uint8)))
    record = json.dumps({
        "config": experiment_yaml(sections),
        "vocab_size": len(words),
        "tokenizer": {"kind": "word", "fingerprint": word_fingerprint(words)},
        "corpus_fingerprint": "",
        "train_state": None,
    })
    metadata = {"format": FORMAT, "version": str(VERSION), "record": record,
                "sha256": checksum(record, tensors)}
    write_atomic(path, safetensors_bytes(tensors, metadata))


def read_checkpoint(path):
    """(record dict with 'config' parsed as YAML-lite, {txl name: tensor}, tokenizer bytes)."""
    tensors, metadata = read_safetensors(path)
    if metadata.get("format") != FORMAT or metadata.get("version") != str(VERSION):
        raise InteropError(f"{path}: not a txl checkpoint of format version {VERSION}")
    if checksum(metadata["record"], tensors) != metadata.get("sha256"):
        raise InteropError(f"{path} is damaged: its SHA-256 does not match its contents")
    record = json.loads(metadata["record"])
    model = {name[len("model/"):]: t for name, t in tensors if name.startswith("model/")}
    tokenizer = dict(tensors).get("tokenizer")
    return record, model, bytes(tokenizer.numpy().tobytes()) if tokenizer is not None else b""


def parse_model_section(config_yaml):
    """The model section of txl's dumped experiment (flat `key: value` lines) with txl's defaults."""
    model = dict(DEFAULT_MODEL)
    inside = False
    for line in config_yaml.splitlines():
        if not line.startswith(" "):
            inside = line.strip() == "model:"
            continue
        if inside and line.startswith("  ") and not line.startswith("   ") and ":" in line:
            key, value = line.strip().split(":", 1)
            model[key] = parse_scalar(value.strip())
    return model


def parse_scalar(text):
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("["):
        inner = text[1:-1].strip()
        return [parse_scalar(x.strip()) for x in inner.split(",")] if inner else []
    if text.startswith('"'):
        return json.loads(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# txl's model defaults (include/txl/config/config.h), for a dump that leaves a key out.
DEFAULT_MODEL = {
    "attn_type": "xl", "n_layer": 4, "d_model": 256, "n_head": 4, "d_head": 64, "d_inner": 1024,
    "dropout": 0.1, "dropatt": 0.0, "tgt_len": 128, "mem_len": 128, "ext_len": 0, "clamp_len": -1,
    "same_length": False, "pre_norm": False, "final_norm": True, "untie_r": False, "cutoffs": [],
    "div_val": 1, "tie_weight": True, "tie_projs": True, "init": "normal", "init_std": 0.02,
    "proj_init_std": 0.01, "mem_init": "empty",
}


# ------------------------------------------------------------------------------ names

def layer_map(prefix, l):
    """Paper / HF per-layer names -> txl's (the paper code's layout, which HF kept)."""
    p, t = f"{prefix}layers.{l}.", f"layers.{l}."
    return {
        p + "dec_attn.qkv_net.weight": t + "attn.qkv.weight",
        p + "dec_attn.o_net.weight": t + "attn.out.weight",
        p + "dec_attn.r_net.weight": t + "attn.r_net.weight",
        p + "dec_attn.layer_norm.weight": t + "attn_norm.weight",
        p + "dec_attn.layer_norm.bias": t + "attn_norm.bias",
        p + "pos_ff.CoreNet.0.weight": t + "ff.fc1.weight",
        p + "pos_ff.CoreNet.0.bias": t + "ff.fc1.bias",
        p + "pos_ff.CoreNet.3.weight": t + "ff.fc2.weight",
        p + "pos_ff.CoreNet.3.bias": t + "ff.fc2.bias",
        p + "pos_ff.layer_norm.weight": t + "ff_norm.weight",
        p + "pos_ff.layer_norm.bias": t + "ff_norm.bias",
    }


def n_clusters(model):
    return len(model["cutoffs"]) + 1


def has_projs(model):
    return model["div_val"] != 1  # txl's adaptive layers are d_model wide: no head projection at div_val 1


def name_map(model, flavour):
    """{foreign name: txl name} for a txl model config; flavour "paper" or "hf". Foreign names that
    are tied copies of another tensor (the output tables and tail projections) map to None."""
    pre = "transformer." if flavour == "hf" else ""
    names = {}
    for l in range(model["n_layer"]):
        names.update(layer_map(pre, l))
        if model["untie_r"]:
            names[f"{pre}layers.{l}.dec_attn.r_w_bias"] = f"layers.{l}.attn.u_bias"
            names[f"{pre}layers.{l}.dec_attn.r_r_bias"] = f"layers.{l}.attn.v_bias"
        elif flavour == "hf":  # HF's layers list the shared biases again under their own names
            names[f"{pre}layers.{l}.dec_attn.r_w_bias"] = None
            names[f"{pre}layers.{l}.dec_attn.r_r_bias"] = None
    if not model["untie_r"]:
        names[pre + "r_w_bias"] = "u_bias"
        names[pre + "r_r_bias"] = "v_bias"
    tables = 1 if model["div_val"] == 1 else n_clusters(model)
    for k in range(tables):
        names[f"{pre}word_emb.emb_layers.{k}.weight"] = f"word_emb.emb_layers.{k}.weight"
        names[f"crit.out_layers.{k}.bias"] = f"crit.out_layers.{k}.bias"
        names[f"crit.out_layers.{k}.weight"] = None if model["tie_weight"] else f"crit.out_layers.{k}.weight"
    if has_projs(model):
        for k in range(n_clusters(model)):
            names[f"{pre}word_emb.emb_projs.{k}"] = f"word_emb.emb_projs.{k}"
            tied = model["tie_projs"] and k > 0
            names[f"crit.out_projs.{k}"] = None if tied else f"crit.out_projs.{k}"
    if n_clusters(model) > 1:
        names["crit.cluster_weight"] = "crit.cluster_weight"
        names["crit.cluster_bias"] = "crit.cluster_bias"
    if model["pre_norm"] and model["final_norm"]:
        names["final_norm.weight"] = "final_norm.weight"  # txl's own: no paper or HF counterpart
        names["final_norm.bias"] = "final_norm.bias"
    return names


def tied_source(name, flavour):
    """The foreign name a tied copy must equal: crit.out_layers.k.weight -> emb_layers.k.weight."""
    pre = "transformer." if flavour == "hf" else ""
    m = re.fullmatch(r".*layers\.\d+\.dec_attn\.(r_w_bias|r_r_bias)", name)
    if m:
        return pre + m.group(1)
    m = re.fullmatch(r"crit\.out_layers\.(\d+)\.weight", name)
    if m:
        return f"{pre}word_emb.emb_layers.{m.group(1)}.weight"
    m = re.fullmatch(r"crit\.out_projs\.(\d+)", name)
    return f"{pre}word_emb.emb_projs.{m.group(1)}"


def inv_freq(d_model):
    return 1 / (10000 ** (torch.arange(0.0, d_model, 2.0) / d_model))


def to_txl(state, model, flavour, origin):
    """{foreign name: tensor} -> {txl name: tensor}. Refuses (naming them) parameters it cannot
    map, missing ones, and tied copies that differ from what they are tied to."""
    names = name_map(model, flavour)
    pre = "transformer." if flavour == "hf" else ""
    out, problems = {}, []
    for name, t in state.items():
        if name == pre + "pos_emb.inv_freq":  # the sinusoid's frequencies, a buffer: must be the formula
            if t.shape != (model["d_model"] // 2,) or not torch.allclose(t.float(), inv_freq(model["d_model"]), rtol=1e-6):
                problems.append(f"{name}: not the sinusoid frequencies 1/10000^(2i/d) of d_model {model['d_model']}")
            continue
        if name not in names:
            problems.append(f"{name}: no txl counterpart (shape {list(t.shape)})")
        elif names[name] is None:
            source = state.get(tied_source(name, flavour))
            if source is None or source.shape != t.shape or not torch.equal(source, t):
                problems.append(f"{name}: tied to {tied_source(name, flavour)} by the hyperparameters, but differs from it")
        else:
            out[names[name]] = t.detach().clone().float() if t.is_floating_point() else t
    for name, target in names.items():
        if target is not None and target not in out and not target.startswith("final_norm"):
            problems.append(f"{name}: missing (txl needs it as {target})")
    if problems:
        raise InteropError(f"{origin}: {len(problems)} parameter(s) cannot be mapped to txl:\n  " + "\n  ".join(problems))
    if flavour == "hf" and "crit.cluster_weight" in out:
        # HF (after the paper's TensorFlow code) gives tail cluster k the head's column
        # c_1 + k - 1; the paper's PyTorch code and txl give it column c_1 + n - k.
        out["crit.cluster_weight"] = out["crit.cluster_weight"].flip(0).contiguous()
        out["crit.cluster_bias"] = out["crit.cluster_bias"].flip(0).contiguous()
    return out


def from_txl(tensors, model, flavour):
    """{txl name: tensor} -> {foreign name: tensor}, tied copies included (as the reference
    implementations' own state_dicts list them)."""
    if model["pre_norm"] and model["final_norm"]:
        raise InteropError("this model has txl's final LayerNorm after the last pre-norm layer "
                           "(model.final_norm: true), which the paper's and Hugging Face's code lack")
    if model["attn_type"] != "xl":
        raise InteropError(f"model.attn_type {model['attn_type']}: only xl has a paper / Hugging Face counterpart")
    inverse = {}
    for foreign, txl in name_map(model, flavour).items():
        if txl is not None:
            inverse[txl] = foreign
    extra = sorted(set(tensors) - set(inverse))
    if extra:
        raise InteropError("txl tensors without a counterpart: " + ", ".join(extra))
    out = {inverse[name]: t.clone() for name, t in tensors.items()}
    if flavour == "hf" and "crit.cluster_weight" in out:
        out["crit.cluster_weight"] = out["crit.cluster_weight"].flip(0).contiguous()
        out["crit.cluster_bias"] = out["crit.cluster_bias"].flip(0).contiguous()
    for foreign, txl in name_map(model, flavour).items():
        if txl is None:
            out[foreign] = out[tied_source(foreign, flavour)].clone()
    pre = "transformer." if flavour == "hf" else ""
    out[pre + "pos_emb.inv_freq"] = inv_freq(model["d_model"])
    return out


def fill_tied(state, model, flavour):
    """A state_dict may leave out tied copies (Hugging Face's safetensors files do): put back
    those the name map expects, from what they are tied to."""
    state = dict(state)
    for foreign in name_map(dict(model, tie_weight=False, tie_projs=False), flavour):
        if foreign.startswith("crit.out_") and foreign not in state and not foreign.endswith(".bias"):
            source = state.get(tied_source(foreign, flavour))
            if source is not None:
                state[foreign] = source
    return state


def vocab_from_file(path):
    """Symbols one per line in id order (a "symbol<TAB>count" line keeps its count)."""
    words, counts = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            word, _, count = line.partition("\t")
            words.append(word)
            counts.append(int(count) if count.isdigit() else 0)
    check_words(words, path)
    return words, counts


def vocab_from_corpus(path, specials=("<eos>",)):
    """The paper code's Vocab (utils/vocabulary.py) of a training text: the specials, then the
    words by count, most frequent first, ties in order of first appearance (Counter.most_common);
    each line is `line.strip().split()` plus <eos>."""
    counts = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            for w in line.strip().split() + ["<eos>"]:
                counts[w] = counts.get(w, 0) + 1
    words = list(specials)
    seen = set(words)
    for w, _ in sorted(counts.items(), key=lambda item: -item[1]):
        if w not in seen:
            words.append(w)
            seen.add(w)
    check_words(words, path)
    return words, [counts.get(w, 0) for w in words]
