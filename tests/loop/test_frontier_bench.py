"""bench/gpu/frontier_suite.py's verdicts (#30), from side-by-side rounds: the loop's final version
against the best known one (paired by round), and the matmul's speed relative to torch."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))
import frontier_suite as fs  # noqa: E402

LN = fs.TARGETS["layer_norm"]


def _sbs(**medians):
    """A side-by-side document: each version's per-round medians (three samples around each)."""
    return {"config": "c", "versions": [{"name": n, "runs": [{"median": m, "samples": [m * 0.999, m, m * 1.001]}
                                                             for m in ms]} for n, ms in medians.items()]}


def _versions(final_same_as=None):
    vs = [{"name": "original"}, {"name": LN["known"][0][0]}, {"name": LN["known"][1][0]}, {"name": "loop final"}]
    if final_same_as:
        vs[-1]["same_as"] = final_same_as
    return vs


def test_layer_norm_verdict_against_the_best_known_version():
    one, two = LN["known"][0][0], LN["known"][1][0]
    rounds = {"original": [0.0861] * 5, one: [0.0774] * 5, two: [0.0741] * 5}
    slower = fs.verdict("layer_norm", LN, _versions(), _sbs(**rounds, **{"loop final": [0.0774] * 5}))
    assert slower["met"] is False and slower["best_known"] == two and slower["final_vs_best"]["ratio"] > 1.04
    faster = fs.verdict("layer_norm", LN, _versions(), _sbs(**rounds, **{"loop final": [0.0735] * 5}))
    assert faster["met"] is True and faster["final_vs_best"]["rounds"] == 5
    # the loop ended on (2)'s very source: timed once, and it is the best
    same = fs.verdict("layer_norm", LN, _versions(two), _sbs(**rounds))
    assert same["met"] is True and same["best_known"] == two


def test_matmul_verdict_is_torch_over_final():
    mm = fs.TARGETS["matmul"]
    vs = [{"name": "original"}, {"name": "loop final"}]
    v = fs.verdict("matmul", mm, vs, _sbs(original=[1.7] * 4, **{"loop final": [1.6] * 4}, torch=[1.5] * 4))
    assert v["met"] is False and abs(v["speed_vs_torch"] - 1.5 / 1.6) < 1e-3
    v = fs.verdict("matmul", mm, vs, _sbs(original=[1.7] * 4, **{"loop final": [1.55] * 4}, torch=[1.5] * 4))
    assert v["met"] is True
    assert fs.verdict("matmul", mm, vs, _sbs(original=[1.7] * 4, **{"loop final": [1.55] * 4}))["met"] is None
