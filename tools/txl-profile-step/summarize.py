#!/usr/bin/env python3
"""Self time per op of a Chrome trace written by txl-profile-step --trace (autograd profiler).

usage: summarize.py trace.json [top]
Nested events (aten::matmul -> aten::bmm, backward nodes -> aten ops) are charged only their
self time, so the column adds up to the traced wall time per thread.
"""
import collections
import json
import sys


def main():
    events = json.load(open(sys.argv[1]))
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_thread[e.get("tid")].append(e)
    self_time = collections.Counter()
    calls = collections.Counter()
    total = 0.0
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [end, name, child time]
        def close(upto):
            while stack and stack[-1][0] <= upto:
                end, name, child, dur = stack.pop()
                self_time[name] += dur - child
                if stack:
                    stack[-1][2] += dur
        for e in evs:
            close(e["ts"])
            stack.append([e["ts"] + e["dur"], e["name"], 0.0, e["dur"]])
            calls[e["name"]] += 1
        close(float("inf"))
    total = sum(self_time.values())
    print(f"{'op':40s} {'calls':>6s} {'self ms':>9s} {'share':>6s}")
    for name, t in self_time.most_common(top):
        print(f"{name[:40]:40s} {calls[name]:6d} {t / 1e3:9.1f} {100 * t / total:5.1f}%")
    groups = {"copies": ("copy_", "contiguous", "cat", "constant_pad", "clone", "_to_copy"),
              "fills": ("fill_", "zero_", "masked_fill")}
    for group, keys in groups.items():
        t = sum(v for k, v in self_time.items() if any(s in k for s in keys))
        print(f"{group}: {100 * t / total:.1f}% of {total / 1e3:.1f} ms")


if __name__ == "__main__":
    main()
