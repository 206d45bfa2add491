"""The beam (loop.beam, #30): on a gather-based row norm whose persistent grid gains alone but
costs with occupancy hints (a planted interaction), a greedy walk locks in the grid; the beam
ends at the best set it can reach (hints + approximate division, no grid), measures no set
twice, and the ledger shows the frontier and every step's parent."""
from __future__ import annotations


from looptools import RankedDiagnoser, git, make_loop, rec

from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.loop import recipe as rc
from cutile_diag.loop.backends import SimulatedBackend, Version
from cutile_diag.transforms import TRANSFORMS

import pytest

SPEC = {"configs": {"large": 0.4}, "bytes": {"large": 2.0e8},   # far below the roof: --until-roof goes on
        "effects": {"persistent_grid": 0.92, "kernel_hints": 0.86, "approx_div": 0.97},
        "interactions": {"persistent_grid+kernel_hints": 1.13}, "noise": 0.002, "run_noise": 0.0005}
RECS = [rec("B", "persistent_grid"), rec("C", "kernel_hints"), rec("H", "approx_div"), rec("A", "gather_to_load")]


@pytest.fixture
def row_norm_repo(tmp_path):
    """The gather-based row norm, its mean a provably float32 division (approx_div applies)."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    src = (EXAMPLES_DIR / "row_norm.py").read_text()
    (r / "row_norm.py").write_text(src.replace("ct.sum(acc, axis=0) / N", "ct.sum(acc, axis=0) / ct.astype(N, ct.float32)"))
    git(r, "add", "-A")
    git(r, "commit", "-qm", "initial")
    return r


def _loop(repo, beam=None, **opts):
    return make_loop(repo, SPEC, ref=f"{repo / 'row_norm.py'}::row_norm", diagnoser=RankedDiagnoser(RECS),
                     transforms=TRANSFORMS, until_roof=0.99, rounds=2, max_sweep=2, beam=beam, **opts)


def test_the_beam_escapes_the_first_gain(row_norm_repo):
    r = _loop(row_norm_repo)
    res = r.start()
    assert r.opt.beam_width == 3
    assert res.final_ms / res.baseline_ms <= 0.845, r.led.table_path.read_text()
    final = r.led.last_kept()
    names = {rc.name_of(k) for k in rc.recipe(final["applied"])}
    assert names >= {"kernel_hints", "approx_div"} and "persistent_grid" not in names
    # the branch ends on the best set
    assert git(r.s.worktree, "rev-parse", "HEAD") == final["commits"]["kept"]
    # no set measured twice: every step's candidates are new digests
    parents = [p for p in r.led.of_type("parent") if p.get("step") is not None]
    digests = [d for p in parents for d in p["candidates"]]
    assert digests and len(digests) == len(set(digests))
    assert next(x for x in r.led.iterations if x["iteration"] == 0)["digest"] not in digests
    # the ledger names each row's parent and shows the frontier
    assert all(p["frontier"] and p["move"]["kind"] in ("add", "drop", "setting", "again") for p in parents)
    assert [p["step"] for p in parents] == [x["iteration"] for x in r.led.iterations if x["iteration"] > 0]
    assert r.led.of_type("parent")[-1].get("final")
    # the speedup is the paired comparisons' along the final set's line (its parents, not the last keeps)
    assert res.paired_ratio == pytest.approx(res.final_ms / res.baseline_ms, rel=0.02)
    assert res.to_json()["speedup"] is None and res.to_json()["simulated_speedup"] == pytest.approx(1 / res.paired_ratio)


def test_the_greedy_walk_locks_in(row_norm_repo):
    """--beam 1 is today's walk: the persistent grid (ranked first) stays under everything."""
    r = _loop(row_norm_repo, beam=1)
    res = r.start()
    assert res.final_ms / res.baseline_ms > 0.86
    assert "persistent_grid" in {rc.name_of(k) for k in rc.recipe(r.led.last_kept()["applied"])}


def test_a_set_counts_once_and_interactions_multiply():
    sim = SimulatedBackend(SPEC)
    files = {"k.py": "x"}
    hints = ('kernel_hints{"occupancy": 8}', 'kernel_hints{"occupancy": 2}', 'kernel_hints{"occupancy": 8}')
    assert sim.latency(Version("", files, None, hints), "large") == pytest.approx(0.4 * 0.86)
    both = Version("", files, None, ("persistent_grid", 'kernel_hints{"occupancy": 4}'))
    assert sim.latency(both, "large") == pytest.approx(0.4 * 0.92 * 0.86 * 1.13)
    assert rc.recipe(hints) == ('kernel_hints{"occupancy": 8}',)
    assert rc.arithmetic_only(["persistent_grid"], ["persistent_grid", "approx_div"])
    assert not rc.arithmetic_only(["approx_div"], ["approx_div", "kernel_hints"])


def test_a_set_is_one_source_whatever_the_order():
    src = (EXAMPLES_DIR / "row_norm.py").read_text().replace("/ N", "/ ct.astype(N, ct.float32)", 1)
    orig = Version("baseline", {"row_norm.py": src})
    kw = dict(kernel_file="row_norm.py", kernel="row_norm", transforms=TRANSFORMS)
    one = rc.build(['persistent_grid{"blocks_per_sm": 4}', 'kernel_hints{"occupancy": 4}'], orig, **kw)
    two = rc.build(['kernel_hints{"occupancy": 4}', 'persistent_grid{"blocks_per_sm": 4}'], orig, **kw)
    assert one is not None and one.digest == two.digest


def test_members_are_diagnosed_and_stopped_on_their_own_measurements(row_norm_repo):
    """Each frontier member is diagnosed with the roofline points measured for it, and --until-roof
    reads the best member (not whichever keep came last)."""
    seen = []

    class Recording(RankedDiagnoser):
        def diagnose(self, ctx):
            seen.append(ctx.points)
            return super().diagnose(ctx)

    r = make_loop(row_norm_repo, SPEC, ref=f"{row_norm_repo / 'row_norm.py'}::row_norm", diagnoser=Recording(RECS),
                  transforms=TRANSFORMS, until_roof=0.99, rounds=2, max_sweep=2, beam=None)
    r.start()
    keeps = [x for x in r.led.iterations if x["status"] == "keep"]
    assert len(keeps) >= 3
    for k in keeps:
        assert r._kept_record(k["digest"]) is k
    best = r.beam.best().record
    assert r._kept_record() is best
    assert best is not keeps[-1] or best["latency_ms"] == min(k["latency_ms"] for k in keeps)
    # the members' points differ (their latencies do), and the diagnoses saw more than one of them
    assert len({str(p) for p in seen if p}) >= 2


def _it(i, digest, base, ms, ratio=None, status="keep"):
    return {"type": "iteration", "iteration": i, "digest": digest, "base_digest": base, "latency_ms": ms,
            "status": status, "comparison": {"ratio": ratio} if ratio else None}


def test_the_paired_ratio_follows_the_kept_line_and_ignores_the_sittings_drift(tmp_path):
    """Each kept step's ratio was measured interleaved with its parent; the product along the line is the
    speedup, whatever the baseline's own sitting read (here 10 % slow)."""
    import json
    from cutile_diag.ledger import Ledger
    recs = [{"type": "setup", "kernel": "k"}, _it(0, "o", "o", 1.10), _it(1, "a", "o", 0.98, 0.98), _it(2, "x", "a", 0.90, 1.02, "revert"),
            _it(3, "b", "o", 0.95, 0.95), _it(4, "ab", "b", 0.92, 0.97),
            {"type": "parent", "digest": "ab", "final": True}]
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    led = Ledger.load(tmp_path)
    assert led.paired_ratio() == pytest.approx(0.95 * 0.97)          # o -> b -> ab, not through a
    # a manual step on the line (no paired ratio) leaves only the sittings' figure
    recs[5]["comparison"] = None
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert Ledger.load(tmp_path).paired_ratio() is None


def test_a_loop_told_to_yield_stops_when_no_move_is_expected_to_gain(row_norm_repo):
    """A campaign's loop (``yield_flat``) takes only moves expected to beat the best member by the keep threshold,
    then stops (rule ``unpromising``) so that kernels with more to gain get the time; alone it goes on."""
    r = _loop(row_norm_repo, yield_flat=True)
    res = r.start()
    assert res.stop_rule == "unpromising" and "no gain on the best version's x0." in res.stop_reason, res.stop_reason
    steps = [p for p in r.led.of_type("parent") if p.get("step") is not None]
    assert steps and all(p["move"]["expected"] <= 0.98 * min(m["est"] for m in p["frontier"]) + 1e-9 for p in steps)
    alone = _loop(row_norm_repo, branch="alone")
    assert alone.start().stop_rule != "unpromising"
    assert len(alone.led.iterations) > len(r.led.iterations)


def test_an_untried_setting_keeps_the_prior_when_its_transform_measured_flat():
    from cutile_diag.loop.beam import PRIOR, expectation

    def step(t, params, ratio):
        return {"iteration": 1, "status": "revert", "change": {"transform": t, "params": params},
                "comparison": {"ratio": ratio}}
    est = expectation([{"iteration": 0}, step("kernel_hints", {"occupancy": 1}, 1.001),
                       step("tile_size_sweep", {"BLOCK_SIZE": 512}, 0.893), step("approx_div", {}, 0.999)])
    assert est("kernel_hints", {"occupancy": 1}) == 1.001          # the same setting elsewhere: as measured
    assert est("kernel_hints", {"occupancy": 4}) == PRIOR          # another setting of a flat transform: the prior
    assert est("kernel_hints") == 1.001                            # a drop: what the transform measured
    assert est("tile_size_sweep", {"BLOCK_SIZE": 1024}) == 0.893   # a setting of a transform that gained: its gain
    assert est("approx_div", {}) == 0.999 and est("exp2", {}) == PRIOR
