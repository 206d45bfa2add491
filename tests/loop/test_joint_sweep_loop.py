"""The loop screens a joint sweep's points cheaply and confirms the best against the kept version."""
from __future__ import annotations

import json

from looptools import make_loop, rec

from cutile_diag.transforms import JointSweep

J = JointSweep()


def test_the_loop_screens_the_points_and_keeps_the_best(repo):
    src = (repo / "vector_add.py").read_text()
    cands = J.candidates(src, "vector_add")
    best = cands[2]
    key = "joint_sweep" + json.dumps(best, sort_keys=True)
    r = make_loop(repo, {"effects": {key: 0.7, "joint_sweep": 0.97}}, recs=[rec("C", "joint_sweep")],
                  transforms={"joint_sweep": J}, max_sweep=len(cands), max_iterations=1)
    r.start()
    it = r.led.iterations[-1]
    assert it["status"] == "keep" and it["decision"]["rule"] == "keep-baseline"
    assert len(it["sweep"]) == len(cands) and [row["params"] for row in it["sweep"] if row["chosen"]] == [best]


def test_tile_loads_in_a_one_row_per_block_kernel_are_swept_with_and_without_tma(tmp_path):
    """A's candidates are its TMA form and its tma="off" form (one sweep): on the H200 the TMA
    form warp-specialises a one-row-per-block kernel to one resident block per SM (3.9-7.4x
    slower); the off point compiles and captures from the workload (real AOT capture) at 128
    threads.  Tried once on this version: not offered again."""
    from looptools import diagnosis

    from cutile_diag.measure.capture import capture_auto
    from cutile_diag.diagnose.collect_capture import resident_ctas
    from cutile_diag.examples import EXAMPLES_DIR
    from cutile_diag.loop.backends import Version
    from cutile_diag.loop.choose import choose
    from cutile_diag.transforms import TRANSFORMS
    src = (EXAMPLES_DIR / "row_norm.py").read_text()
    a = Version("baseline", {"row_norm.py": src}, "c0")
    choice, _, _ = choose(diagnosis(rec("A", "gather_to_load")), a, kernel_file="row_norm.py", kernel="row_norm",
                          transforms=TRANSFORMS, attempted=set(), max_sweep=4)
    assert [c.params for c in choice.candidates] == [{}, {"tma": "off"}]
    off = choice.candidates[1]
    assert "allow_tma=False" in off.result.description
    assert [k.split("{")[0] for k in off.version.applied] == ["gather_to_load"]
    f = tmp_path / "row_norm.py"
    f.write_text(off.version.files["row_norm.py"])
    cap = capture_auto(f"{f}::row_norm", workload="examples:row_norm", workload_kwargs={"source": str(f)},
                       gpu=False, out_dir=tmp_path / "cap")
    n, why = resident_ctas(cap.folder)
    assert why.startswith("128 threads") and n > 1
    tried = {(a.digest, "gather_to_load", '{"tma": "off"}')}
    again, _, _ = choose(diagnosis(rec("A", "gather_to_load")), a, kernel_file="row_norm.py", kernel="row_norm",
                         transforms=TRANSFORMS, attempted=tried, max_sweep=4)
    assert [c.params for c in again.candidates] == [{}]
