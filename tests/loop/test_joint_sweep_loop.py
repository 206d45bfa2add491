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


PERSISTENT_GATHER = '''import cuda.tile as ct


@ct.kernel
def scale_rows(X, Y, M: ct.Constant[int], TILE: ct.Constant[int]):
    cols = ct.arange(TILE, dtype=ct.int32)
    for row in range(ct.bid(0), M, ct.num_blocks(0)):
        x = ct.gather(X, (row, cols))
        ct.scatter(Y, (row, cols), x * 2.0)


def launch(x, y):
    import torch
    ct.launch(torch.cuda.current_stream(), (132,), scale_rows, (x, y, x.shape[0], x.shape[1]))
'''


def test_tile_loads_in_a_one_row_per_block_kernel_also_try_a_persistent_grid(tmp_path):
    """A's candidates on a one-row-per-block kernel are A and A + persistent grid (one sweep): A
    alone gives such kernels a TMA pipeline at one resident block per SM (7.4x slower on the
    H200); the joint point compiles (real AOT capture). A kernel already persistent gets A alone."""
    from looptools import diagnosis

    from cutile_diag.capture.auto import capture_auto
    from cutile_diag.examples import EXAMPLES_DIR
    from cutile_diag.loop.backends import Version
    from cutile_diag.loop.choose import choose
    from cutile_diag.loop.transforms import TRANSFORMS
    src = (EXAMPLES_DIR / "row_norm.py").read_text()
    a = Version("baseline", {"row_norm.py": src}, "c0")
    choice, _, _ = choose(diagnosis(rec("A", "gather_to_load")), a, kernel_file="row_norm.py", kernel="row_norm",
                          transforms=TRANSFORMS, attempted=set(), max_sweep=4)
    assert [c.params for c in choice.candidates] == [{}, {"with": "persistent_grid"}]
    joint = choice.candidates[1]
    assert "with persistent_grid" in joint.result.description
    assert [k.split("{")[0] for k in joint.version.applied] == ["gather_to_load", "persistent_grid"]
    f = tmp_path / "row_norm.py"
    f.write_text(joint.version.files["row_norm.py"])
    cap = capture_auto(f"{f}::row_norm", workload="examples:row_norm", workload_kwargs={"source": str(f)},
                       gpu=False, out_dir=tmp_path / "cap")
    assert cap.folder.manifest["launch"]["grid"][0] < 16384           # a persistent grid, not one block per row
    # tried once on this version: not offered again; with a sweep of one, A goes alone
    tried = {(a.digest, "gather_to_load", '{"with": "persistent_grid"}')}
    again, _, _ = choose(diagnosis(rec("A", "gather_to_load")), a, kernel_file="row_norm.py", kernel="row_norm",
                         transforms=TRANSFORMS, attempted=tried, max_sweep=4)
    assert [c.params for c in again.candidates] == [{}]
    p = Version("baseline", {"k.py": PERSISTENT_GATHER}, "c0")
    only, _, _ = choose(diagnosis(rec("A", "gather_to_load")), p, kernel_file="k.py", kernel="scale_rows",
                        transforms=TRANSFORMS, attempted=set(), max_sweep=4)
    assert [c.params for c in only.candidates] == [{}]
