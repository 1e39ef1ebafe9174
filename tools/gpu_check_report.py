#!/usr/bin/env python3
"""The report of tools/gpu_check.sh.

  gpu_check_report.py OUT DEVICE GPUS START
      joins OUT/steps/*.json (one object per step) into OUT/report.json, prints a summary and
      exits 1 when a step's status is anything but "passed" or "skipped"
  gpu_check_report.py --compare GPU_RUN CPU_RUN TOLERANCE
      prints, as JSON, the last validation loss of both runs (their metrics.jsonl) and whether
      they agree within TOLERANCE, relative to the CPU's
  gpu_check_report.py --ctest LOG RC DEVICE
      prints, as JSON, what a ctest run's log says (its exit status RC): tests run, passed,
      failed and skipped, each test's own figures (its lines that start with "[ cuda" or
      "[ cpu"), and the step's status: "passed" when RC is 0, a test ran, and on DEVICE cuda
      none skipped. It reads each test's result line ("1/4 Test #474: Name ...   Passed"), not
      the summary line, whose words change between CMake versions ("100% tests passed, 0 tests
      failed out of 4" in 3.25, "100% tests passed out of 4" in later ones)
"""
import json
import pathlib
import platform
import re
import subprocess
import sys
import time


def last_valid_loss(run):
    loss = None
    with open(pathlib.Path(run) / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record.get("kind") == "eval" and record.get("split") == "valid" and record.get("loss") is not None:
                loss = (record["step"], record["loss"])
    if loss is None:
        raise SystemExit(f"{run}/metrics.jsonl has no validation loss")
    return loss


def compare(gpu_run, cpu_run, tolerance):
    (gpu_step, gpu), (cpu_step, cpu) = last_valid_loss(gpu_run), last_valid_loss(cpu_run)
    relative = abs(gpu - cpu) / abs(cpu)
    print(json.dumps({"step": gpu_step, "cpu_step": cpu_step, "gpu_valid_loss": gpu,
                      "cpu_valid_loss": cpu, "relative_difference": relative,
                      "tolerance": tolerance, "within": relative <= tolerance and gpu_step == cpu_step}))


RESULT = re.compile(r"^\s*\d+/\d+ Test +#\d+: (\S+) \.*\s*(?:\*{3})?(.+?)\s+[\d.]+ sec")
FIGURE = re.compile(r"^(?:\d+: )?(\[ (?:cuda|cpu)[^\]]*\] .*)$")


def ctest(log, rc, device):
    results, figures = {}, []
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if m := RESULT.match(line):
                results[m.group(1)] = m.group(2).strip()
            elif m := FIGURE.match(line):
                figures.append(m.group(1))
    count = lambda word: sum(1 for r in results.values() if r == word)
    passed, skipped = count("Passed"), count("Skipped")
    failed = len(results) - passed - skipped
    ok = int(rc) == 0 and results and failed == 0 and not (device == "cuda" and skipped)
    print(json.dumps({"status": "passed" if ok else "failed", "tests": len(results), "passed": passed,
                      "failed": failed, "skipped": skipped, "results": results, "figures": figures}))


def gpu_names():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return [line.strip() for line in out.stdout.splitlines() if line.strip()] or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def report(out, device, gpus, start):
    out = pathlib.Path(out)
    steps = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / "steps").glob("*.json"))]
    failed = [s["name"] for s in steps if s["status"] not in ("passed", "skipped")]
    result = {
        "passed": not failed and bool(steps),
        "failed": failed,
        "device": device,
        "gpus": int(gpus),
        "gpu_names": gpu_names() if device == "cuda" else [],
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": int(time.time()) - int(start),
        "steps": steps,
    }
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / "report.json")
    for s in steps:
        print(f"[gpu_check] {s['name']:<16} {s['status']:<8} {s['seconds']:>5} s")
    print(f"[gpu_check] {'passed' if result['passed'] else 'FAILED: ' + ', '.join(failed)} "
          f"in {result['seconds']} s; report: {out / 'report.json'}")
    return 0 if result["passed"] else 1


def main(argv):
    if len(argv) == 4 and argv[0] == "--compare":
        compare(argv[1], argv[2], float(argv[3]))
        return 0
    if len(argv) == 4 and argv[0] == "--ctest":
        ctest(argv[1], argv[2], argv[3])
        return 0
    if len(argv) == 4:
        return report(*argv)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
