"""The loop screens a joint sweep's points cheaply and confirms the best against the kept version."""
from __future__ import annotations

import json

from looptools import make_loop, rec

from cutile_diag.loop.transforms import JointSweep

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
