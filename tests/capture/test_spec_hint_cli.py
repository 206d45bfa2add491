"""A kernel without specs gets one message from every command that needs them: its parameters
with their real kinds, and an example built from those parameters that works as printed."""
from __future__ import annotations

import shlex

import pytest

from cutile_diag.cli import main
from cutile_diag.examples import EXAMPLES_DIR

pytest.importorskip("cuda.tile")

REF = f"{EXAMPLES_DIR / 'row_norm.py'}::row_norm"          # no CAPTURE_SPECS, like most library kernels
TYPED = ("X=DTYPE[d0,d1] (2-D array), Y=DTYPE[d0,d1] (2-D array), Mean=DTYPE[d0] (1-D array), "
         "Rstd=DTYPE[d0] (1-D array), N=DTYPE (scalar: i32, f32, ...), EPS=<float> (ct.Constant[float]), "
         "TILE_N=<int> (ct.Constant[int])")


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("cutile-diag: error:")]
    assert len(err) == 1
    return err[0]


def test_capture_roofline_and_diagnose_give_the_same_typed_list_and_a_working_example(capsys, tmp_path):
    errs = {cmd: _error(capsys, argv) for cmd, argv in (
        ("capture", ["capture", REF, "--out", str(tmp_path / "c")]),
        ("roofline", ["roofline", REF, "--device", "h200", "--latency-ms", "0.1"]),
        ("diagnose", ["diagnose", REF]))}
    examples = set()
    for cmd, err in errs.items():
        assert TYPED in err, (cmd, err)
        assert "array or scalar" not in err
        examples.add(err.split("e.g. ", 1)[1].rstrip(")"))
    assert len(examples) == 1                         # one function wrote all three
    assert "(or --workload REF" in errs["capture"]   # the command's own other source of specs
    example = shlex.split(examples.pop())
    assert example[::2] == ["--arg"] * 7
    # the example, pasted as printed, captures and places the kernel
    assert main(["capture", REF, "--out", str(tmp_path / "ok"), "--json", *example]) == 0
    capsys.readouterr()
    assert main(["roofline", REF, "--device", "h200", "--latency-ms", "0.1", *example]) == 0


def test_a_partial_spec_lists_only_what_is_missing(capsys, tmp_path):
    err = _error(capsys, ["capture", REF, "--out", str(tmp_path), "--arg", "X=f32[64,64]", "--arg", "Y=f32[64,64]"])
    assert "no spec for parameters Mean, Rstd, N, EPS, TILE_N of row_norm" in err
    assert "e.g. --arg Mean=f32[4096] --arg Rstd=f32[4096] --arg N=i32 --arg EPS=0.5 --arg TILE_N=128" in err
