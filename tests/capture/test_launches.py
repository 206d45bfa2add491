"""Launch interception on a CPU: the records a wrapper's ct.launch produces become capture specs."""
import torch

from cutile_diag.capture.launches import LaunchRecord, cpu_cuda, intercept_launches
from cutile_diag.examples import matmul, softmax, vector_add


def test_wrappers_give_grid_and_specs():
    a16 = torch.zeros(256, 128, dtype=torch.float16)
    b16 = torch.zeros(128, 256, dtype=torch.float16)
    c16 = torch.zeros(256, 256, dtype=torch.float16)
    with cpu_cuda(sm_count=132), intercept_launches() as recs:
        matmul.launch(a16, b16, c16)
        softmax.launch(torch.zeros(64, 1000), torch.zeros(64, 1000))
        vector_add.launch(*(torch.zeros(1 << 20),) * 3, persistent=True)
    mm, sm, va = recs
    assert (mm.kernel, mm.grid) == ("matmul", (2, 2))
    assert {k: s.text() for k, s in mm.specs().items()} == {
        "A": "f16[256,128]", "B": "f16[128,256]", "C": "f16[256,256]", "TM": "128", "TN": "128", "TK": "64"}
    assert sm.grid == (64,) and sm.specs()["TILE_N"].value == 1024
    # persistent wrapper: grid = min(tiles, 4 x SMs) from the stand-in device's SM count
    assert va.kernel == "vector_add_persistent" and va.grid_blocks == 4 * 132


def test_a_launch_whose_arguments_do_not_match_the_kernel_is_refused_not_truncated():
    """A record made from one argument too many (or too few) would drop it silently and the
    capture would compile a kernel the launch never runs: one line names the kernel and counts."""
    import cuda.tile as ct
    import pytest

    from cutile_diag.capture.launches import LaunchArgumentsError
    t = torch.zeros(4096)
    with cpu_cuda(), intercept_launches() as recs:
        for args in ((t, t, t, 1024, 1), (t, t, t)):
            with pytest.raises(LaunchArgumentsError) as e:
                ct.launch(None, (4,), vector_add.vector_add, args)
            assert e.value.one_line() == (f"the launch of vector_add passes {len(args)} argument(s); the kernel "
                                          "takes 4 (a, b, c, TILE)")
        ct.launch(None, (4,), vector_add.vector_add, (t, t, t, 1024))
    assert [len(r.args) for r in recs] == [4]


def test_records_round_trip_and_restore_launch():
    import cuda.tile as ct
    before = ct.launch
    with cpu_cuda(), intercept_launches() as recs:
        softmax.launch(torch.zeros(8, 100, dtype=torch.float16), torch.zeros(8, 100, dtype=torch.float16))
    assert ct.launch is before
    r = recs[0]
    back = LaunchRecord.from_json(r.to_json())
    assert back == r and back.shape_key() == r.shape_key()


def test_layout_and_alignment_from_strides():
    x = torch.zeros(64, 32).t()          # F-ordered view
    off = torch.zeros(1025)[1:]          # 4-byte aligned base
    with cpu_cuda(), intercept_launches() as recs:
        softmax.launch(x.contiguous(), x.contiguous())
        vector_add.launch(off, off, off)
    assert recs[0].args[0].spec().layout == "C"
    assert recs[1].args[0].align == 4 and recs[1].args[0].spec().text() == "f32[1024]:align=4"
