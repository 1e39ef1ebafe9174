#!/usr/bin/env python3
"""tools/gpu_check_report.py: the 1% comparison of validation losses and the joined report
(a failed step fails the check, a skipped one does not)."""
import json
import pathlib
import subprocess
import sys
import tempfile

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "gpu_check_report.py"


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def write_run(folder, losses):
    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"kind": "train", "step": 10, "loss": 9.0}]
    lines += [{"kind": "eval", "split": "valid", "step": s, "loss": l} for s, l in losses]
    lines.append({"kind": "eval", "split": "test", "step": losses[-1][0], "loss": 1.0})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def compare(tmp, gpu_loss, cpu_loss):
    write_run(tmp / f"g{gpu_loss}", [(100, 7.0), (200, gpu_loss)])
    write_run(tmp / f"c{cpu_loss}", [(100, 7.5), (200, cpu_loss)])
    r = run("--compare", tmp / f"g{gpu_loss}", tmp / f"c{cpu_loss}", 0.01)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# What ctest printed on the H200 (CMake 3.31: no "0 tests failed" in the summary) and here
# (CMake 3.25), with -V's test output between the result lines.
LOG_NEW = """Test project /b
    Start 474: GpuDecoding.Fp32AtUsersSizesEqualsTheFp64Forward
474: [ cuda fp32] rope, memory longer than a segment: decoding against the fp64 forward 1.9e-06
1/2 Test #474: GpuDecoding.Fp32AtUsersSizesEqualsTheFp64Forward .......   Passed    4.19 sec
    Start 511: Gpu.TrainsOnTheGpuLikeOnTheCpu
2/2 Test #511: Gpu.TrainsOnTheGpuLikeOnTheCpu .........................   Passed    2.69 sec

100% tests passed out of 2
"""
LOG_OLD = """Test project /b
    Start 505: GpuDecoding.Fp32AtUsersSizesEqualsTheFp64Forward
1/3 Test #505: GpuDecoding.Fp32AtUsersSizesEqualsTheFp64Forward ...***Skipped   0.46 sec
    Start 511: Gpu.TrainsOnTheGpuLikeOnTheCpu
2/3 Test #511: Gpu.TrainsOnTheGpuLikeOnTheCpu ...   Passed    0.46 sec
    Start 512: Gpu.ACheckpointLoads
3/3 Test #512: Gpu.ACheckpointLoads ...***Exception: SegFault  0.30 sec

67% tests passed, 1 tests failed out of 3
"""


def ctest(tmp, log, rc, device):
    (tmp / "ctest.log").write_text(log)
    r = run("--ctest", tmp / "ctest.log", rc, device)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def check_ctest(tmp):
    new = ctest(tmp, LOG_NEW, 0, "cuda")
    assert new["status"] == "passed" and (new["tests"], new["passed"]) == (2, 2), new
    assert new["figures"] == [LOG_NEW.splitlines()[2][len("474: "):]], new
    assert ctest(tmp, LOG_NEW, 8, "cuda")["status"] == "failed"  # ctest's own exit status counts
    assert ctest(tmp, "Test project /b\nNo tests were found!!!\n", 0, "cpu")["status"] == "failed"
    old = ctest(tmp, LOG_OLD, 8, "cuda")
    assert (old["tests"], old["passed"], old["skipped"], old["failed"]) == (3, 1, 1, 1), old
    assert old["results"]["Gpu.ACheckpointLoads"] == "Exception: SegFault", old
    skipped = LOG_OLD.replace("SegFault", "").replace("***Exception: ", "   Passed")
    assert ctest(tmp, skipped, 0, "cuda")["status"] == "failed"  # a skip on the GPU fails
    assert ctest(tmp, skipped, 0, "cpu")["status"] == "passed"  # and is expected on the CPU


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        check_ctest(tmp)
        near = compare(tmp, 5.04, 5.0)  # 0.8%: the last validation loss, not the test split's
        assert near["within"] and abs(near["relative_difference"] - 0.008) < 1e-9, near
        assert near["gpu_valid_loss"] == 5.04 and near["cpu_valid_loss"] == 5.0, near
        far = compare(tmp, 5.06, 5.0)  # 1.2%
        assert not far["within"], far

        out = tmp / "check"
        (out / "steps").mkdir(parents=True)
        steps = [("build", "passed"), ("distributed", "skipped"), ("bench", "passed")]
        for i, (name, status) in enumerate(steps):
            (out / "steps" / f"{i:02d}_{name}.json").write_text(
                json.dumps({"name": name, "status": status, "seconds": 1, "details": {}}))
        r = run(out, "cpu", 0, 0)
        report = json.loads((out / "report.json").read_text())
        assert r.returncode == 0 and report["passed"] and report["failed"] == [], (r.stdout, report)
        (out / "steps" / "03_kjv_valid_loss.json").write_text(
            json.dumps({"name": "kjv_valid_loss", "status": "failed", "seconds": 1, "details": far}))
        r = run(out, "cpu", 0, 0)
        report = json.loads((out / "report.json").read_text())
        assert r.returncode == 1 and not report["passed"], (r.stdout, report)
        assert report["failed"] == ["kjv_valid_loss"] and len(report["steps"]) == 4, report
        (out / "steps" / "03_kjv_valid_loss.json").write_text(  # a status nobody set is a failure
            json.dumps({"name": "kjv_valid_loss", "status": "", "seconds": 1, "details": {}}))
        r = run(out, "cpu", 0, 0)
        assert r.returncode == 1 and not json.loads((out / "report.json").read_text())["passed"], r.stdout
    print("gpu_check_report: ok")


if __name__ == "__main__":
    main()
