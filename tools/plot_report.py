#!/usr/bin/env python3
"""Plots of a txl ablation report (called by txl-ablate through txl::experiment::write_report).

Reads results.json (the evaluation records and each split's analysis; an older file is a plain
list of records) and each variant's metrics.jsonl, and writes into --out:
  training_loss.png  training loss against step, one line per variant (validation dashed)
  context_ppl.png    perplexity on --split against evaluation context length
                     (mem_len for memory mode, window for sliding, tgt_len for segments)
  eval_cost.png      evaluation cost (seconds per token, log scale) against perplexity
and, when the report has them:
  context_sweep.png  the context sweep: ppl (mean and std over seeds) against attention length
  recl.png           the group's RECL per variant at each r
  loss_by_position.png  mean loss at each position of the segment
  loss_by_document_position.png  mean loss by position in the document (powers of two)
Each PNG is written to a temporary file and renamed, so a crash never leaves half an image.

Also, for txl-eval's context sweep (txl::eval::run):
  plot_report.py sweep context_sweep.json context_sweep.png
plots perplexity against evaluation memory length, one line per split; and for txl-bench --sweep
(txl::bench::run_sweep):
  plot_report.py bench-sweep sweep.json sweep.png
plots training tokens/s and peak RSS against tgt_len = mem_len and against the batch, and the
attention cost per token against mem_len with its least-squares line.

txl runs this script with an argument vector (no shell), found at <bin>/../share/txl/ or at
$TXL_PLOT_SCRIPT, with the interpreter chosen when txl was configured or $TXL_PYTHON.

Exit status: 0 written; 2 bad arguments or input; 3 matplotlib missing (the caller skips plots).
"""

import argparse
import json
import math
import os
import sys


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, help="results.json written by txl-ablate")
    parser.add_argument("--out", required=True, help="directory for the PNG files")
    parser.add_argument("--split", default="test", help="split of the context and cost plots")
    parser.add_argument("--curve", action="append", default=[], metavar="VARIANT=METRICS",
                        help="a variant's metrics.jsonl (repeatable)")
    return parser.parse_args()


def read_metrics(path):
    """Train and validation points of a metrics.jsonl; unreadable lines are skipped."""
    train, valid = [], []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by an interrupted run
                if not isinstance(rec, dict) or "step" not in rec or "loss" not in rec:
                    continue
                if rec.get("kind") == "train":
                    train.append((rec["step"], rec["loss"]))
                elif rec.get("kind") == "eval" and rec.get("split", "valid") == "valid":
                    valid.append((rec["step"], rec["loss"]))
    except OSError as e:
        print(f"warning: cannot read {path}: {e.strerror}", file=sys.stderr)
    return train, valid


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def import_pyplot():
    """matplotlib's pyplot on the file-only backend, or None when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display here
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (apt install python3-matplotlib, or pip install "
              "matplotlib)", file=sys.stderr)
        return None
    return plt


def save(fig, out_dir, name):
    """Renders to a temporary file beside the target, renames it into place, closes the
    figure."""
    path = os.path.join(out_dir, name)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    import matplotlib.pyplot as plt  # loaded already by import_pyplot
    plt.close(fig)
    print(path)


def sweep(json_path, png_path):
    """Perplexity against attention length (memory M, or the sliding window L of an absolute-
    position model), from txl-eval --sweep's JSON list."""
    plt = import_pyplot()
    if plt is None:
        return 3
    try:
        with open(json_path, encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"cannot read {json_path}: {e}", file=sys.stderr)
        return 2
    if not isinstance(results, list):
        print(f"{json_path}: expected a list of results", file=sys.stderr)
        return 2
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_split = {}
    for r in results:
        if isinstance(r, dict) and finite(r.get("ppl")) and "mem_len" in r:
            length = r.get("window", 0) if r.get("mode") == "sliding" else r["mem_len"]
            by_split.setdefault(r.get("split", "?"), []).append((length, r["ppl"]))
    for i, (split, points) in enumerate(by_split.items()):
        points.sort()
        ax.plot([m for m, _ in points], [p for _, p in points], marker="o", color=f"C{i % 10}",
                label=split)
    if by_split:
        ax.legend(fontsize=8)
    ax.set_xlabel("attention length c (memory M, or sliding window L)")
    ax.set_ylabel("perplexity")
    ax.set_title("Perplexity against attention length")
    ax.grid(alpha=0.3)
    save(fig, os.path.dirname(os.path.abspath(png_path)), os.path.basename(png_path))
    return 0


def bench_sweep(json_path, png_path):
    """txl-bench --sweep's sweep.json: throughput and memory against length and batch, and the
    attention cost against mem_len."""
    plt = import_pyplot()
    if plt is None:
        return 3
    try:
        with open(json_path, encoding="utf-8") as f:
            data = json.load(f)
        points, att = data["points"], data["attention"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        print(f"cannot read {json_path}: {e!r}", file=sys.stderr)
        return 2
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, series, key, label in ((axes[0], "length", "tgt_len", "tgt_len = mem_len"),
                                   (axes[1], "batch", "batch", "batch")):
        pts = [p for p in points if p["series"] == series]
        if not pts:
            ax.text(0.5, 0.5, f"no {series} points", ha="center", va="center",
                    transform=ax.transAxes)
            continue
        xs = [p[key] for p in pts]
        ax.plot(xs, [p["tokens_per_s"] for p in pts], "o-", color="tab:blue")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        ax.set_ylabel("training tokens/s", color="tab:blue")
        twin = ax.twinx()
        twin.plot(xs, [p["peak_rss_mb"] for p in pts], "s--", color="tab:red")
        twin.set_ylabel("peak RSS (MB)", color="tab:red")
        fixed = f"batch {pts[0]['batch']}" if series == "length" else f"tgt_len {pts[0]['tgt_len']}"
        ax.set_title(f"training fp32 vs {label} ({fixed})")
    ms = [p["mem_len"] for p in att["points"]]
    axes[2].plot(ms, [p["us_per_token"] for p in att["points"]], "o", label="measured")
    axes[2].plot(ms, [att["intercept_us"] + att["slope_us"] * m for m in ms], "-",
                 label=f"least squares, r2 = {att['r2']:.3f}")
    axes[2].set_xlabel("mem_len")
    axes[2].set_ylabel("attention block, us per query token")
    axes[2].set_title(f"attention cost vs memory (tgt_len {att['tgt_len']}, batch {att['batch']})")
    axes[2].legend()
    fig.tight_layout()
    save(fig, os.path.dirname(os.path.abspath(png_path)), os.path.basename(png_path))
    return 0


SUBCOMMANDS = {"sweep": (sweep, "RESULTS.json OUT.png"),
               "bench-sweep": (bench_sweep, "SWEEP.json OUT.png")}


def main():
    if len(sys.argv) >= 2 and sys.argv[1] in SUBCOMMANDS:
        command, usage = SUBCOMMANDS[sys.argv[1]]
        if len(sys.argv) != 4:
            print(f"usage: plot_report.py {sys.argv[1]} {usage}", file=sys.stderr)
            return 2
        return command(sys.argv[2], sys.argv[3])
    args = parse_args()
    plt = import_pyplot()
    if plt is None:
        return 3

    try:
        with open(args.results, encoding="utf-8") as f:
            records = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"cannot read {args.results}: {e}", file=sys.stderr)
        return 2
    analyses, memory_help = [], []
    if isinstance(records, dict):  # a report's results.json: records, then each split's analysis
        analyses = records.get("analysis", [])
        memory_help = records.get("memory_help", [])
        records = records.get("records")
    if not isinstance(records, list):
        print(f"{args.results}: expected a list of records", file=sys.stderr)
        return 2
    records = [r for r in records if not r.get("sweep")]
    curves = []
    for item in args.curve:
        variant, sep, path = item.partition("=")
        if not sep:
            print(f"--curve {item!r}: expected VARIANT=PATH", file=sys.stderr)
            return 2
        curves.append((variant, path))

    # Training loss against step.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for i, (variant, path) in enumerate(curves):
        train, valid = read_metrics(path)
        color = f"C{i % 10}"
        if train:
            ax.plot([s for s, _ in train], [l for _, l in train], color=color, label=f"{variant} train")
            drawn = True
        if valid:
            ax.plot([s for s, _ in valid], [l for _, l in valid], color=color, linestyle="--",
                    marker="o", markersize=3, label=f"{variant} valid")
            drawn = True
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no training metrics", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title("Training loss")
    ax.grid(alpha=0.3)
    save(fig, args.out, "training_loss.png")

    # The context and cost plots use --split, else the first split present.
    splits = [r.get("split") for r in records]
    split = args.split if args.split in splits else (splits[0] if splits else args.split)
    rows = [r for r in records if r.get("split") == split and finite(r.get("ppl"))]

    def context(r):
        mode = r.get("eval_mode")
        if mode == "memory":
            return r.get("mem_len", 0)
        if mode == "sliding":
            return r.get("window", 0)
        return r.get("tgt_len", 0)

    # Perplexity against evaluation context length, one line per (variant, mode).
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups = {}
    for r in rows:
        groups.setdefault((r["variant"], r["eval_mode"]), []).append(r)
    markers = {"memory": "o", "segments": "s", "sliding": "^"}
    for i, ((variant, mode), group) in enumerate(groups.items()):
        by_context = {}  # seeds averaged
        for r in group:
            by_context.setdefault(context(r), []).append(r["ppl"])
        xs = sorted(by_context)
        ax.plot(xs, [sum(by_context[x]) / len(by_context[x]) for x in xs], color=f"C{i % 10}",
                marker=markers.get(mode, "x"), label=f"{variant} / {mode}")
    if groups:
        ax.legend(fontsize=8)
    ax.set_xlabel("evaluation context length (memory M, sliding window L, segments Q)")
    ax.set_ylabel(f"{split} perplexity")
    ax.set_title(f"Perplexity against context ({split})")
    ax.grid(alpha=0.3)
    save(fig, args.out, "context_ppl.png")

    # Evaluation cost against perplexity.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    costed = [r for r in rows if r.get("tokens", 0) > 0 and finite(r.get("seconds"))
              and r["seconds"] > 0]
    for i, ((variant, mode), group) in enumerate(groups.items()):
        pts = [r for r in group if r in costed]
        if not pts:
            continue
        xs = [r["seconds"] / r["tokens"] for r in pts]
        ax.scatter(xs, [r["ppl"] for r in pts], color=f"C{i % 10}", marker=markers.get(mode, "x"),
                   label=f"{variant} / {mode}")
        for x, r in zip(xs, pts):
            ax.annotate(str(context(r)), (x, r["ppl"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    if costed:
        ax.set_xscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("evaluation cost (seconds per token, log scale)")
    ax.set_ylabel(f"{split} perplexity")
    ax.set_title(f"Evaluation cost against perplexity ({split}; labels: context length)")
    ax.grid(alpha=0.3)
    save(fig, args.out, "eval_cost.png")

    analysis = next((a for a in analyses if a.get("split") == split), None)
    if analysis is not None and analysis.get("sweeps"):
        plot_sweeps(plt, analysis, args.out)
    if analysis is not None and analysis.get("recl", {}).get("variants"):
        plot_recl(plt, analysis, args.out)
    if any(r.get("loss_by_position") for r in rows):
        plot_positions(plt, rows, split, args.out)
    if any(r.get("loss_by_document_position") for r in rows):
        plot_document_positions(plt, rows, split, args.out)
    helps = [h for h in memory_help if h.get("split") == split]
    if helps:
        plot_memory_gain(plt, helps[0], args.out)
        if helps[0].get("attention"):
            plot_attention_mass(plt, helps[0], args.out)
    return 0


def seed_mean_curves(rows, field):
    """Per evaluation (variant, mode, M, L): the element-wise mean over its seeds of the list
    `field` (NaN entries skipped; NaN where no seed has a value), and the evaluation's label."""
    groups = {}
    for r in rows:
        if r.get(field):
            key = (r["variant"], r["eval_mode"], r.get("mem_len", 0), r.get("window", 0))
            groups.setdefault(key, []).append(r[field])
    out = []
    for (variant, mode, mem, window), curves in groups.items():
        means = []
        for k in range(min(len(c) for c in curves)):
            vals = [c[k] for c in curves if finite(c[k])]
            means.append(sum(vals) / len(vals) if vals else float("nan"))
        label = f"{variant} / {mode}" + (f" M={mem}" if mode == "memory" else "") + \
            (f" L={window}" if mode == "sliding" else "")
        out.append((label, means))
    return out


def plot_document_positions(plt, rows, split, out_dir):
    """Mean loss by position in the document (buckets 0, 1-2, 3-6, ...), per evaluation, seeds
    averaged."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, means) in enumerate(seed_mean_curves(rows, "loss_by_document_position")):
        # bucket k starts at position 2^k - 1: plotted at 2^k
        pts = [(2 ** k, m) for k, m in enumerate(means) if finite(m)]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color=f"C{i % 10}",
                label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position in the document + 1 (buckets of powers of two)")
    ax.set_ylabel("mean loss (nats)")
    ax.set_title(f"Loss by position in the document ({split})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out_dir, "loss_by_document_position.png")


def plot_sweeps(plt, analysis, out_dir):
    """Perplexity against attention length per variant (mean and std over seeds), Attn Len
    marked."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, s in enumerate(analysis["sweeps"]):
        means = [p.get("mean") for p in s["ppl"]]
        stds = [p.get("std") or 0.0 for p in s["ppl"]]
        pts = [(c, m, e) for c, m, e in zip(s["contexts"], means, stds) if finite(m)]
        if not pts:
            continue
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    color=f"C{i % 10}", marker="o", capsize=3,
                    label=f"{s['variant']} (Attn Len {s['attn_len']})")
        if finite(s.get("ppl_best")):
            ax.scatter([s["attn_len"]], [s["ppl_best"]], color=f"C{i % 10}", marker="*", s=120)
    ax.set_xlabel("attention length c (memory M with same_length, or sliding window L)")
    ax.set_ylabel(f"{analysis['split']} perplexity")
    ax.set_title(f"Context sweep ({analysis['split']}; star: PPL best at Attn Len)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, out_dir, "context_sweep.png")


def plot_recl(plt, analysis, out_dir):
    """RECL per variant, one bar per ratio r."""
    recl = analysis["recl"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    n = len(recl["ratios"])
    width = 0.8 / max(n, 1)
    for k, r in enumerate(recl["ratios"]):
        xs = [i + (k - (n - 1) / 2) * width for i in range(len(recl["variants"]))]
        ax.bar(xs, [row[k] for row in recl["recl"]], width=width, label=f"r = {r}")
    ax.set_xticks(range(len(recl["variants"])))
    ax.set_xticklabels(recl["variants"])
    contexts = recl["contexts"]
    ax.set_ylabel("RECL (tokens)")
    ax.set_title(f"Relative effective context length ({analysis['split']}; grid "
                 f"{contexts[0]}..{contexts[-1]})")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    save(fig, out_dir, "recl.png")


def plot_memory_gain(plt, help, out_dir):
    """Where memory helps: the ppl ratio (no memory over memory) of each group of tokens with its
    interval, one panel per grouping; the bar label is the group's share of the summed gain."""
    tables = help.get("tables", [])
    fig, axes = plt.subplots(1, max(len(tables), 1), figsize=(4.2 * max(len(tables), 1), 4.5),
                             squeeze=False)
    for ax, table in zip(axes[0], tables):
        rows = [r for r in table["rows"] if finite(r.get("ratio")) and r.get("tokens", 0) > 0]
        xs = range(len(rows))
        ratios = [r["ratio"] for r in rows]
        low = [r["ratio"] - r["low"] if finite(r.get("low")) else 0.0 for r in rows]
        high = [r["high"] - r["ratio"] if finite(r.get("high")) else 0.0 for r in rows]
        # Bars grow from 1 (no difference): up where b's memory helps, down where it hurts.
        ax.bar(xs, [r - 1.0 for r in ratios], bottom=1.0, yerr=[low, high], capsize=3,
               color=["C0" if r >= 1.0 else "C3" for r in ratios])
        for x, r in zip(xs, rows):
            share = r.get("share")
            if finite(share):
                ax.annotate(f"{100 * share:.0f}%", (x, r["ratio"]), fontsize=7, ha="center",
                            xytext=(0, 4), textcoords="offset points")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["group"].replace(" ", "\n", 1) + f"\n({r['tokens']})" for r in rows],
                           fontsize=7)
        ax.set_title(table["title"], fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        lo = min([r["low"] for r in rows if finite(r.get("low"))] + ratios + [1.0])
        hi = max([r["high"] for r in rows if finite(r.get("high"))] + ratios + [1.0])
        ax.set_ylim(lo - 0.02 * (hi - lo + 0.01), hi + 0.1 * (hi - lo + 0.01))
    axes[0][0].set_ylabel(f"ppl {help['a']} / ppl {help['b']}")
    fig.suptitle(f"Where memory helps ({help['split']}): {help['b']} against {help['a']}, by group "
                 "of tokens (bar label: the group's share of the summed gain)", fontsize=10)
    save(fig, out_dir, "memory_gain.png")


def plot_attention_mass(plt, help, out_dir):
    """Where attention looks: each layer's share of attention weight by distance to the query,
    one panel per model of the pair (no memory, memory); the legend gives the share on memory."""
    attention = help["attention"]
    groups = attention["groups"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], (help["a"], help["b"])):
        side = "a" if name == help["a"] else "b"
        model = attention[side]
        seed = attention.get("seed_a" if side == "a" else "seed")
        for layer, (shares, memory) in enumerate(zip(model["mass"], model["memory"]), start=1):
            ax.plot(range(len(groups)), shares, marker="o", markersize=3,
                    label=f"layer {layer} (memory {memory:.2f})")
        ax.set_xticks(list(range(len(groups))))
        ax.set_xticklabels(groups, rotation=45, fontsize=7)
        ax.set_xlabel("distance to the query (tokens)")
        ax.set_title(f"{name}, seed {seed} (memory of {model['mem_len']} tokens)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("share of attention weight")
    fig.suptitle(f"Where attention looks ({help['split']})", fontsize=10)
    save(fig, out_dir, "attention_mass.png")


def plot_positions(plt, rows, split, out_dir):
    """Mean loss at each position of the segment, per evaluation, seeds averaged."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, means) in enumerate(seed_mean_curves(rows, "loss_by_position")):
        ax.plot(range(len(means)), means, color=f"C{i % 10}", label=label)
    ax.set_xlabel("position in the segment")
    ax.set_ylabel("mean loss (nats)")
    ax.set_title(f"Loss by position in the segment ({split})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out_dir, "loss_by_position.png")


if __name__ == "__main__":
    sys.exit(main())
