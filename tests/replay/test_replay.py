"""Replay on a CPU: a launch recorded without executing (the observer's dry run) loads back with its
shapes, dtypes, sharing, whole integer tensors and the wrapper call; a size cap regenerates floats
from their statistics; executed launches (emulated on the CPU) give the written arguments and the
baseline's answer, an in-place kernel's input is restored before each replay, a changed answer
fails the check; bad recordings are one line and exit 2."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

pytest.importorskip("cuda.tile")
import torch  # noqa: E402

from cutile_diag.measure import observe as lo  # noqa: E402
from cutile_diag.cli import main  # noqa: E402
from cutile_diag import replay  # noqa: E402

KERNELS = textwrap.dedent('''
    import cuda.tile as ct

    SCALE = 2.0


    @ct.kernel
    def gather_rows(x, idx, y, TILE: ct.Constant[int]):
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,))
        ct.store(y, index=(bid,), tile=t)


    @ct.kernel
    def scale_(x, s, TILE: ct.Constant[int]):
        bid = ct.bid(0)
        t = ct.load(x, index=(bid,), shape=(TILE,))
        ct.store(x, index=(bid,), tile=t * s)


    def gather(x, idx, out=None, tile=None, stream=None):
        import torch
        tile = tile or 256
        out = out if out is not None else torch.empty_like(x)
        ct.launch(stream, (ct.cdiv(x.shape[0], tile),), gather_rows, (x, idx, out, tile))
        return out


    def scale_inplace(x, stream=None):
        ct.launch(stream, (x.shape[0] // 256,), scale_, (x, SCALE, 256))
        return x
''')

SCRIPT = textwrap.dedent('''
    import sys, torch
    sys.path.insert(0, {root!r})
    import kops
    x = torch.randn(4096)
    idx = torch.arange(4096, dtype=torch.int64).flip(0)
    torch.save(idx, {root!r} + "/idx.pt")
    for _ in range(3):
        kops.gather(x, idx)
    kops.scale_inplace(x[1024:2048])
''')


def _emulate(monkeypatch):
    """cuda.tile's launch, computed by torch on the CPU: what the kernels above do."""
    import cuda.tile as ct

    def launch(stream, grid, kernel, args, /, **kw):
        name = kernel._pyfunc.__name__
        if name == "gather_rows":
            x, idx, y, _t = args
            y.copy_(x[idx] * kops_scale())
        else:
            x, s, _t = args
            x.mul_(s)
    monkeypatch.setattr(ct, "launch", launch)


def kops_scale() -> float:
    return float(sys.modules["kops"].SCALE)


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kops.py").write_text(KERNELS)
    (root / "prog.py").write_text(SCRIPT.format(root=str(root)))
    out = tmp_path / "replay"
    monkeypatch.setenv("CUTILE_DIAG_REPLAY_CAP_MB", str(8 * 1024 / 2 ** 20))      # 8 KiB: x regenerates
    run = lo.observe_command([sys.executable, str(root / "prog.py")], execute=False, replay_dir=out)
    return root, out, run


def test_a_dry_run_records_each_signature_once_with_shapes_sharing_whole_integers_and_the_wrapper(recorded):
    root, out, run = recorded
    folders = replay.store.replay_folders(out)
    assert len(run.records) == 4 and sorted(f.name.split("-")[0] for f in folders) == ["gather_rows", "scale_"]
    gather = next(f for f in folders if f.name.startswith("gather_rows"))
    r = replay.load(gather, device="cpu")
    launch = run.records[0]
    assert [(tuple(a.shape), str(a.dtype).split(".")[1]) for a in r.args[:3]] == \
        [(a.shape, a.dtype) for a in launch.args[:3]]
    assert r.args[3] == 256 and r.grid == (16,)
    # the int64 index is whole (past the 8 KiB cap), the float input regenerated from its statistics
    assert torch.equal(r.args[1], torch.load(root / "idx.pt"))
    st = {s["id"]: s for s in r.manifest["storages"]}
    x_store = st[r.manifest["args"][0]["value"]["tensor"]["storage"]]
    assert x_store["stored"] == "regenerated" and abs(x_store["stats"]["std"] - 1.0) < 0.1
    assert abs(float(r.args[0].std()) - 1.0) < 0.1
    # drawn on the replay's device in their own type, the same at every load (the cached answer is computed on them)
    again = replay.load(gather, device="cpu")
    assert again.args[0].dtype == r.args[0].dtype and torch.equal(again.args[0], r.args[0])
    from cutile_diag.replay.load import regen_tag
    assert regen_tag("cpu") == "cpu-v2" and regen_tag("cuda:1") == "cuda-v2"
    # the wrapper's call: its own arguments (the rebound `tile` and `out` at their defaults)
    fn, args, kwargs = r.wrapper
    assert fn.__name__ == "gather" and args[1].data_ptr() == r.args[1].data_ptr() and args[2:] == [None, None, None]
    assert r.manifest["executed"] is False and r.written == []


def test_arguments_that_share_memory_share_it_in_the_replay(tmp_path):
    from cutile_diag.examples import vector_add
    from cutile_diag.replay.record import LaunchRecorder
    from cutile_diag.capture.launches import describe_launch
    a = torch.arange(2048, dtype=torch.float32)
    args = (a[:1024], a[1024:], a[:1024], 1024)
    rec = LaunchRecorder(tmp_path, 1 << 20)
    pend = rec.before(vector_add.vector_add, (1,), args, describe_launch(vector_add.vector_add, (1,), args))
    rec.after(pend, executed=False)
    r = replay.load(pend.folder, device="cpu")
    assert len(r.manifest["storages"]) == 1 and r.args[0].data_ptr() == r.args[2].data_ptr()
    assert r.args[1].storage_offset() == 1024 and torch.equal(r.args[1], a[1024:])
    assert r.wrapper is None and "no function of the kernel's module" in r.manifest["wrapper_missing"]
    assert r.unavailable_transforms() == ["persistent grid", "grid resize", "rows per block"]


def _record_executed(root, out, monkeypatch):
    """The fixture's launches recorded in this process, executed by the CPU emulation."""
    from cutile_diag.capture.launches import describe_launch
    from cutile_diag.replay.record import LaunchRecorder
    sys.path.insert(0, str(root))
    sys.modules.pop("kops", None)
    import kops
    _emulate(monkeypatch)
    import cuda.tile as ct
    emulated = ct.launch
    rec = LaunchRecorder(out, 1 << 20)

    def recording(stream, grid, kernel, args, /, **kw):
        pend = rec.before(kernel, grid, args, describe_launch(kernel, grid, args))
        emulated(stream, grid, kernel, args)
        rec.after(pend, executed=True)
    monkeypatch.setattr(ct, "launch", recording)
    x = torch.randn(4096)
    y = kops.gather(x, torch.arange(4096).flip(0))
    kops.scale_inplace(x[1024:2048])
    monkeypatch.setattr(ct, "launch", emulated)
    return kops, y


def test_an_executed_recording_checks_candidates_and_restores_an_in_place_kernels_input(tmp_path, monkeypatch):
    from cutile_diag.harness.correctness import check_workload
    from cutile_diag.workloads import load_workload
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kops.py").write_text(KERNELS)
    out = tmp_path / "replay"
    try:
        kops, y = _record_executed(root, out, monkeypatch)
        wl = load_workload(f"replay:{out}")
        by = {c.name.split("-")[0]: c for c in wl.configs}
        g = replay.load(out / by["gather_rows"].name, device="cpu")
        assert g.written == ["y"] and torch.equal(g.outputs["y"], y)
        st = g.manifest["storages"][g.manifest["args"][2]["value"]["tensor"]["storage"]]
        assert st["pure_output"] is False or st["written"]       # torch.empty's bytes: poisoned or restored
        # the in-place kernel: its input is written, restored from the recording before every replay
        cfg = by["scale_"]
        assert not wl.repeatable
        inputs = wl.make_inputs(cfg, 0, "cpu")
        r = inputs["replay"]
        before = r.args[0].clone()
        out1 = wl.run(inputs)["x"].clone()
        wl.reset(inputs)
        assert torch.equal(r.args[0], before)
        assert torch.equal(wl.run(inputs)["x"], out1)          # not scaled twice
        assert check_workload(wl, cfg, seed=0, device="cpu").passed
        assert check_workload(wl, by["gather_rows"], seed=0, device="cpu").passed
        # a candidate whose answer differs (the wrapper's module scales by 3) fails the replayed check
        (root / "kops.py").write_text(KERNELS.replace("SCALE = 2.0", "SCALE = 3.0"))
        sys.modules.pop("kops", None)
        bad = load_workload(f"replay:{out}", file=str(root / "kops.py"))
        res = check_workload(bad, bad.config(by["gather_rows"].name), seed=0, device="cpu")
        assert not res.passed and "y" in res.summary
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("kops", None)


def test_bad_recordings_are_one_line_and_exit_2(recorded, capsys):
    root, out, _run = recorded
    folder = replay.store.replay_folders(out)[0]
    assert main(["replay", str(out / "nope")]) == 2
    assert "no replay recording at" in capsys.readouterr().err
    # recorded without executing: nothing to check against
    assert main(["replay", str(folder)]) == 2
    assert "recorded without executing" in capsys.readouterr().err
    # another version of the kernel's file
    (root / "kops.py").write_text(KERNELS + "\n# edited\n")
    with pytest.raises(replay.ReplayError, match="another version"):
        replay.load(folder, device="cpu")
    man = folder / "replay.json"
    man.write_text(man.read_text()[:50])
    assert main(["replay", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is corrupt" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    man.write_text(json.dumps({"schema": "cutile-diag.replay/0"}))
    assert main(["replay", str(folder), "--json"]) == 2
    assert "this cutile-diag reads cutile-diag.replay/1" in capsys.readouterr().err


def test_the_campaign_plan_lists_a_replay_folder_per_configuration(tmp_path, monkeypatch, capsys):
    """`campaign --plan --dry-run --json` on the demo repository: the survey recorded every configuration
    (no extra run), each loads with the launch's shapes and dtypes and the wrapper's call."""
    from cutile_diag.campaign.demo import make_repo, survey_command
    from cutile_diag.capture.spec import parse_spec
    repo = make_repo(tmp_path)
    monkeypatch.chdir(repo)
    assert main(["campaign", "--plan", "--dry-run", "--json", "--", *survey_command()]) == 0
    d = json.loads(capsys.readouterr().out)
    configs = [c for k in d["plan"]["kernels"] for c in k["configs"]]
    assert len(configs) == 5 and d["survey"]["seconds"] > 0
    for c in configs:
        r = replay.load(c["replay"], device="cpu")
        for name, spec in c["specs"].items():
            value = r.args[r.arg_names.index(name)]
            s = parse_spec(spec)
            if hasattr(value, "shape"):
                assert (tuple(value.shape), str(value.dtype).split(".")[1]) == \
                    (tuple(s.shape), {"f16": "float16", "f32": "float32"}[spec[:3]]), (name, spec)
        assert r.wrapper[0].__name__ == "launch" and r.manifest["test"] in c["tests"]


HINTED = textwrap.dedent('''
    import cuda.tile as ct


    @ct.kernel(occupancy=2)
    def rows(x, y, TILE: ct.Constant[int]):
        bid = ct.bid(0)
        ct.store(y, index=(bid,), tile=ct.load(x, index=(bid,), shape=(TILE,)))


    def run(x, y, launch):
        # the TileGym pattern: the config's hints replaced on the module's kernel at the launch
        launch(None, (x.shape[0] // 256,), rows.replace_hints(num_worker_warps=8, num_ctas=1), (x, y, 256))
        launch(None, (x.shape[0] // 512,), rows, (x, y, 512))
''')


def test_the_hints_a_wrapper_replaced_at_the_launch_are_replaced_again_in_the_replay(tmp_path, monkeypatch):
    """A kernel launched as ``kernel.replace_hints(...)`` replays with those hints over its module's decorator (the
    candidate's: its own decorator hints stay where the launch did not replace them); the module's own kernel
    object records none."""
    from cutile_diag.capture.launches import describe_launch
    from cutile_diag.replay.record import LaunchRecorder
    (tmp_path / "hinted_ops.py").write_text(HINTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("hinted_ops", None)
    import hinted_ops
    rec = LaunchRecorder(tmp_path / "rec", 1 << 20)
    pends = []

    def launch(stream, grid, kernel, args):
        pends.append(rec.before(kernel, grid, args, describe_launch(kernel, grid, args)))
        rec.after(pends[-1], executed=False)
    hinted_ops.run(torch.zeros(1024), torch.zeros(1024), launch)
    hinted, plain = (replay.load(p.folder, device="cpu") for p in pends)
    assert hinted.manifest["kernel"]["hints"] == {"num_ctas": 1, "num_worker_warps": 8}
    opts = hinted.kernel._compiler_options
    assert (opts.num_worker_warps, opts.num_ctas, opts.occupancy) == (8, 1, 2)
    assert "hints" not in plain.manifest["kernel"] and plain.kernel is hinted_ops.rows
    # a candidate whose decorator changed: the launch's hints still win where the wrapper set them
    (tmp_path / "cand.py").write_text(HINTED.replace("@ct.kernel(occupancy=2)", "@ct.kernel(occupancy=4, num_ctas=2)"))
    cand = replay.load(pends[0].folder, device="cpu", any_version=True, file=str(tmp_path / "cand.py"))
    opts = cand.kernel._compiler_options
    assert (opts.num_worker_warps, opts.num_ctas, opts.occupancy) == (8, 1, 4)


def test_the_replayed_byte_count_moves_a_write_only_output_once_and_skips_unused_arrays(tmp_path, monkeypatch):
    """A torch.empty output holds leftover bytes, so the recording cannot call it a pure output; the kernel's source
    says it is only stored to (TileGym's geglu backward read 3.69 TB/s on an H100 with its output counted twice)."""
    from cutile_diag.workloads import load_workload
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kops.py").write_text(KERNELS)
    out = tmp_path / "replay"
    try:
        _record_executed(root, out, monkeypatch)
        wl = load_workload(f"replay:{out}")
        by = {c.name.split("-")[0]: c for c in wl.configs}
        # gather_rows: x read (16 KiB) + y written once (16 KiB); idx (int64) is never used by the body
        assert wl.bytes(by["gather_rows"]) == 2 * 4096 * 4
        # scale_: the in-place slice x[1024:2048] is read and written
        assert wl.bytes(by["scale_"]) == 2 * 1024 * 4
        # without the kernel's source: every storage, written ones twice (the recording's facts alone)
        (root / "kops.py").write_text("not python (")
        gone = load_workload(f"replay:{out}")
        ms = gone.manifests[by["gather_rows"].name][1]["storages"]
        assert gone.bytes(by["gather_rows"]) == sum(s["size"] * (2 if s["written"] and not s["pure_output"] else 1)
                                                     for s in ms)
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("kops", None)


AUTOGRAD = textwrap.dedent('''
    import cuda.tile as ct
    import torch


    @ct.kernel
    def double_(x, y, TILE: ct.Constant[int]):
        bid = ct.bid(0)
        ct.store(y, index=(bid,), tile=ct.load(x, index=(bid,), shape=(TILE,)) * 2)


    class _Double(torch.autograd.Function):
        # the library style: the launch in the Function's forward, the op a module-level function calling apply
        @staticmethod
        def forward(ctx, x):
            TILE = 256
            y = torch.empty_like(x)
            ct.launch(None, (ct.cdiv(x.shape[0], TILE),), double_, (x, y, TILE))
            ctx.save_for_backward(x)
            ctx.n = x.shape[0]
            return y

        @staticmethod
        def backward(ctx, dy):
            dy = dy.contiguous()                # rebinds its argument: the recording takes what the engine passed
            (x,) = ctx.saved_tensors
            TILE_B = 128
            dx = torch.empty_like(x)
            ct.launch(None, (ct.cdiv(ctx.n, TILE_B),), double_, (dy, dx, TILE_B))
            return dx


    def double(x):
        return _Double.apply(x)


    class Runner:
        def go(self, x):
            y = torch.empty_like(x)
            ct.launch(None, (ct.cdiv(x.shape[0], 64),), double_, (x, y, 64))
            return y
''')


def test_a_launch_in_an_autograd_functions_method_replays_through_the_module_function_that_calls_it(
        tmp_path, monkeypatch):
    """The op function above the Function's ``forward`` is the recorded wrapper, so a candidate that changes the
    tile size inside ``forward`` launches its own grid in the replay; the ``backward`` the autograd engine calls is its
    own wrapper, called again with its ctx as recorded (what forward set and saved); an instance method with no
    module-level function above it is replayed bare and says why."""
    from cutile_diag.capture.launches import describe_launch
    from cutile_diag.replay.record import LaunchRecorder
    from cutile_diag.workloads import load_workload
    import cuda.tile as ct
    (tmp_path / "aops.py").write_text(AUTOGRAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("aops", None)
    import aops
    rec = LaunchRecorder(tmp_path / "rec", 1 << 20)
    pends = []

    def recording(stream, grid, kernel, args, /, **kw):
        pends.append(rec.before(kernel, grid, args, describe_launch(kernel, grid, args)))
        args[1].copy_(args[0] * 2)
        rec.after(pends[-1], executed=True)
    monkeypatch.setattr(ct, "launch", recording)
    x = torch.randn(4096, requires_grad=True)
    y = aops.double(x)
    y.backward(torch.ones(4096))
    aops.Runner().go(torch.randn(2048))
    via_op, bwd, bare = (replay.load(p.folder, device="cpu") for p in pends)
    assert via_op.wrapper[0] is aops.double and via_op.wrapper[1][0].shape == (4096,)
    assert via_op.written == ["y"] and torch.equal(via_op.outputs["y"], y)
    assert bwd.manifest["wrapper"]["name"] == "_Double.backward" and bwd.wrapper[0] is aops._Double.backward
    ctx, dy = bwd.wrapper[1]
    assert ctx.n == 4096 and torch.equal(ctx.saved_tensors[0], x.detach()) and torch.equal(dy, torch.ones(4096))
    assert bare.wrapper is None and "Runner.go" in bare.manifest["wrapper_missing"]

    # a candidate with a larger tile in forward: the replay through its `double` launches the candidate's grid
    launched = []

    def emulated(stream, grid, kernel, args, /, **kw):
        launched.append((tuple(grid), args[2]))
        args[1].copy_(args[0] * 2)
    monkeypatch.setattr(ct, "launch", emulated)
    (tmp_path / "cand.py").write_text(AUTOGRAD.replace("TILE = 256", "TILE = 1024"))
    wl = load_workload(f"replay:{pends[0].folder}", file=str(tmp_path / "cand.py"))
    cfg = wl.configs[0]
    # the check first (it intercepts launches and restores ct.launch after), then plain runs, as a worker does
    from cutile_diag.harness.correctness import check_workload
    assert check_workload(wl, cfg, seed=0, device="cpu").passed
    inputs = wl.make_inputs(cfg, 0, "cpu")
    for _ in range(2):
        got = wl.run(inputs)
        assert launched[-1] == ((4,), 1024) and torch.equal(got["y"], via_op.outputs["y"])
    assert ct.launch is emulated
    # the backward's replay runs the candidate's backward: its tile, on the recorded ctx
    (tmp_path / "cand_b.py").write_text(AUTOGRAD.replace("TILE_B = 128", "TILE_B = 512"))
    wl = load_workload(f"replay:{pends[1].folder}", file=str(tmp_path / "cand_b.py"))
    assert check_workload(wl, wl.configs[0], seed=0, device="cpu").passed and not wl.notes
    got = wl.run(wl.make_inputs(wl.configs[0], 0, "cpu"))
    assert launched[-1] == ((8,), 512) and torch.equal(got["y"], bwd.outputs["y"])


def test_a_candidate_given_to_a_worker_as_text_replays_through_its_own_wrapper(tmp_path, monkeypatch):
    """A sweep's worker gets its version's text for the kernel's path while the disk still holds the recorded one
    (``install_overrides``): the candidate's wrapper launches its own grid, not a bare replay of the recorded one."""
    import importlib.machinery
    import linecache
    from cutile_diag.capture.launches import describe_launch
    from cutile_diag.source import overrides
    from cutile_diag.source.overrides import install as install_overrides
    from cutile_diag.replay.record import LaunchRecorder
    from cutile_diag.workloads import load_workload
    import cuda.tile as ct
    path = tmp_path / "bops.py"
    path.write_text(AUTOGRAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("bops", None)
    import bops
    rec = LaunchRecorder(tmp_path / "rec", 1 << 20)
    launched = []

    def emulated(stream, grid, kernel, args, /, **kw):
        launched.append((tuple(grid), args[2]))
        args[1].copy_(args[0] * 2)

    def recording(stream, grid, kernel, args, /, **kw):
        p = rec.before(kernel, grid, args, describe_launch(kernel, grid, args))
        emulated(stream, grid, kernel, args)
        rec.after(p, executed=True)
    monkeypatch.setattr(ct, "launch", recording)
    bops.double(torch.randn(4096))
    monkeypatch.setattr(ct, "launch", emulated)
    folder = replay.store.replay_folders(tmp_path / "rec")[0]
    # the worker's overrides, undone after the test
    loader = importlib.machinery.SourceFileLoader
    monkeypatch.setattr(loader, "get_data", loader.get_data)
    monkeypatch.setattr(loader, "path_stats", loader.path_stats)
    monkeypatch.setattr(linecache, "cache", dict(linecache.cache))
    monkeypatch.setattr(overrides, "_TEXTS", {})
    install_overrides({str(path): AUTOGRAD.replace("TILE = 256", "TILE = 1024")})
    sys.modules.pop("bops", None)
    wl = load_workload(f"replay:{folder}", file=str(path))
    inputs = wl.make_inputs(wl.configs[0], 0, "cpu")
    wl.run(inputs)
    assert launched[-1] == ((4,), 1024) and not wl.notes
    sys.modules.pop("bops", None)


REBINDING = textwrap.dedent('''
    import cuda.tile as ct
    import torch


    @ct.kernel
    def double_(x, y, TILE: ct.Constant[int]):
        bid = ct.bid(0)
        ct.store(y, index=(bid,), tile=ct.load(x, index=(bid,), shape=(TILE,)) * 2)


    def layout(x):
        x = x.contiguous()                  # rebinds a required argument, values unchanged
        y = torch.empty_like(x)
        ct.launch(None, (ct.cdiv(x.shape[0], 256),), double_, (x, y, 256))
        return y


    def scaled(x):
        x = x * 3                           # rebinds it to other values
        y = torch.empty_like(x)
        ct.launch(None, (ct.cdiv(x.shape[0], 256),), double_, (x, y, 256))
        return y
''')


def test_a_wrapper_that_rebinds_a_required_argument_replays_only_where_the_recorded_values_reproduce_the_launch(
        tmp_path, monkeypatch):
    """``x = x.contiguous()`` before the launch: the wrapper is recorded with x as it was at the launch, and kept once
    the recorded version, called with it, computes the recorded outputs; ``x = x * 3`` does not, so that recording
    replays bare and says why.  A later version's worker follows the recorded version's verdict (bare before it)."""
    from cutile_diag.capture.launches import describe_launch
    from cutile_diag.replay.record import LaunchRecorder
    from cutile_diag.workloads import load_workload
    import cuda.tile as ct
    path = tmp_path / "rops.py"
    path.write_text(REBINDING)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("rops", None)
    import rops
    rec = LaunchRecorder(tmp_path / "rec", 1 << 20)
    pends, launched = [], []

    def emulated(stream, grid, kernel, args, /, **kw):
        launched.append((tuple(grid), args[2]))
        args[1].copy_(args[0] * 2)

    def recording(stream, grid, kernel, args, /, **kw):
        pends.append(rec.before(kernel, grid, args, describe_launch(kernel, grid, args)))
        emulated(stream, grid, kernel, args)
        rec.after(pends[-1], executed=True)
    monkeypatch.setattr(ct, "launch", recording)
    rops.layout(torch.randn(4096))
    rops.scaled(torch.randn(2048))
    monkeypatch.setattr(ct, "launch", emulated)
    lay, sca = (p.folder for p in pends)
    assert replay.load(lay, device="cpu").manifest["wrapper"]["rebound"] == ["x"]

    # a later version (another tile) before the recorded version was replayed: bare, saying why
    (tmp_path / "cand.py").write_text(REBINDING.replace("x.shape[0], 256),), double_, (x, y, 256)",
                                                        "x.shape[0], 1024),), double_, (x, y, 1024)"))
    early = load_workload(f"replay:{lay}", file=str(tmp_path / "cand.py"))
    early.run(early.make_inputs(early.configs[0], 0, "cpu"))
    assert launched[-1] == ((16,), 256) and "not been replayed yet" in early.notes[early.configs[0].name]

    base = load_workload(f"replay:{lay}", file=str(path))
    got = base.run(base.make_inputs(base.configs[0], 0, "cpu"))
    assert not base.notes and launched[-1] == ((16,), 256)
    assert torch.equal(got["y"], replay.load(lay, device="cpu").outputs["y"])
    later = load_workload(f"replay:{lay}", file=str(tmp_path / "cand.py"))
    later.run(later.make_inputs(later.configs[0], 0, "cpu"))
    assert not later.notes and launched[-1] == ((4,), 1024)       # the candidate's own grid

    wl = load_workload(f"replay:{sca}", file=str(path))
    wl.run(wl.make_inputs(wl.configs[0], 0, "cpu"))
    assert "computes other outputs" in wl.notes[wl.configs[0].name]
    # what the loop reads to skip host changes a bare replay would not time (Backend.host_untimed)
    from cutile_diag.replay.store import read_manifest, wrapper_verdict
    assert wrapper_verdict(lay, read_manifest(lay)) is None
    assert "computes other outputs" in wrapper_verdict(sca, read_manifest(sca))


PLAIN = textwrap.dedent('''
    import os

    import cuda.tile as ct
    import torch


    @ct.kernel
    def double_(x, y, TILE: ct.Constant[int]):
        bid = ct.bid(0)
        ct.store(y, index=(bid,), tile=ct.load(x, index=(bid,), shape=(TILE,)) * 2)


    def plain(x):
        tile = int(os.environ.get("ROPS_TILE", "256"))     # state outside the recorded arguments
        y = torch.empty_like(x)
        ct.launch(None, (ct.cdiv(x.shape[0], tile),), double_, (x, y, tile))
        return y
''')


def test_a_plain_wrapper_the_recorded_version_rejects_replays_bare_in_every_later_version(tmp_path, monkeypatch):
    """The recorded version judges every wrapper once and keeps the verdict: a wrapper that no longer makes the
    recorded launch from the recorded arguments (here it reads the environment) is dropped by the workers of later
    versions too, which would otherwise fail every candidate's check on another launch."""
    from cutile_diag.capture.launches import describe_launch
    from cutile_diag.replay.record import LaunchRecorder
    from cutile_diag.replay.store import WRAPPER_VERDICT, read_manifest, wrapper_verdict
    from cutile_diag.workloads import load_workload
    import cuda.tile as ct
    path = tmp_path / "pops.py"
    path.write_text(PLAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("pops", None)
    import pops
    rec = LaunchRecorder(tmp_path / "rec", 1 << 20)
    pends, launched = [], []

    def emulated(stream, grid, kernel, args, /, **kw):
        launched.append((tuple(grid), args[2]))
        args[1].copy_(args[0] * 2)

    def recording(stream, grid, kernel, args, /, **kw):
        pends.append(rec.before(kernel, grid, args, describe_launch(kernel, grid, args)))
        emulated(stream, grid, kernel, args)
        rec.after(pends[-1], executed=True)
    monkeypatch.setattr(ct, "launch", recording)
    pops.plain(torch.randn(4096))
    monkeypatch.setattr(ct, "launch", emulated)
    folder = pends[0].folder
    m = read_manifest(folder)
    assert m["wrapper"]["name"] == "plain" and wrapper_verdict(folder, m) is None   # trusted before it is judged

    monkeypatch.setenv("ROPS_TILE", "512")
    base = load_workload(f"replay:{folder}", file=str(path))
    base.run(base.make_inputs(base.configs[0], 0, "cpu"))
    assert "not the recorded" in base.notes[base.configs[0].name] and launched[-1] == ((16,), 256)
    assert "not the recorded" in wrapper_verdict(folder, m)

    (tmp_path / "cand.py").write_text(PLAIN.replace("* 2)", "* 2)  # a later version"))
    later = load_workload(f"replay:{folder}", file=str(tmp_path / "cand.py"))
    later.run(later.make_inputs(later.configs[0], 0, "cpu"))
    assert "not the recorded" in later.notes[later.configs[0].name] and launched[-1] == ((16,), 256)

    # a verdict left by another recording of the folder is not this one's, nor is an unreadable one
    (folder / WRAPPER_VERDICT).write_text(json.dumps({"source_sha256": "0" * 64, "why": "stale"}))
    assert wrapper_verdict(folder, m) is None
    (folder / WRAPPER_VERDICT).write_text("{not json")
    assert wrapper_verdict(folder, m) is None


def test_a_damaged_recording_costs_its_own_configuration_not_another_kernels(tmp_path, monkeypatch):
    """H200, a campaign's second call: the dropout kernel's recording had lost a tensor file, and every candidate of
    geglu's backward failed its check on that (`_dropout_kernel-... is incomplete: s0.pt is missing`)."""
    from cutile_diag.workloads import load_workload
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kops.py").write_text(KERNELS)
    out = tmp_path / "replay"
    try:
        _record_executed(root, out, monkeypatch)
        by = {f.name.split("-")[0]: f for f in replay.store.replay_folders(out)}
        lost = next(f for f in by["scale_"].glob("s*.pt") if ".after" not in f.name)
        lost.unlink()                                       # the in-place kernel's recording loses an input
        wl = load_workload(f"replay:{out}", kernel="gather_rows")
        assert [c.name.split("-")[0] for c in wl.configs] == ["gather_rows"] and not wl.notes
        from cutile_diag.workloads import check_ref
        check_ref(f"replay:{out}")      # the folder is not refused up front for one damaged recording
        # the damaged kernel itself: one clear line
        with pytest.raises(replay.ReplayError, match="is incomplete"):
            load_workload(f"replay:{out}", kernel="scale_")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("kops", None)


def test_recordings_that_cannot_be_read_stop_the_loop_instead_of_failing_each_candidate(tmp_path, monkeypatch):
    """A recording damaged on disk fails every version alike: the measuring worker says it is the recordings, and
    the backend raises (the loop stops with one line) instead of reverting candidate after candidate as incorrect."""
    from cutile_diag.loop.backends import Version, WorkloadBackend, Workspace
    from cutile_diag.loop.errors import BackendError
    from cutile_diag.loop.proc import Deadline
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kops.py").write_text(KERNELS)
    out = tmp_path / "replay"
    try:
        _record_executed(root, out, monkeypatch)
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("kops", None)
    for f in replay.store.replay_folders(out):
        if f.name.startswith("gather_rows"):
            next(p for p in f.glob("s*.pt") if ".after" not in p.name).unlink()
    ws = Workspace(root, tmp_path / "state", ["kops.py"])
    b = WorkloadBackend(f"replay:{out}", kwargs={"kernel": "gather_rows", "file": str(root / "kops.py")},
                        log_dir=tmp_path / "logs")
    try:
        with pytest.raises(BackendError, match="recorded launches cannot be replayed.*is incomplete"):
            b.verify(Version("baseline", ws.current()), ws, Deadline(120))
    finally:
        b.close()
