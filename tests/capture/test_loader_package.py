"""Kernel files inside a package (TileGym's ``ops/cutile/*.py``) load with their relative imports."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cutile_diag.capture.loader import import_file, load_kernel, package_name
from cutile_diag.cli import main

KERNEL = textwrap.dedent('''
    import cuda.tile as ct

    from .utils import next_power_of_2

    ConstInt = ct.Constant[int]


    @ct.kernel
    def _scale_kernel(X, Y, TILE: ConstInt):
        bid = ct.bid(0)
        x = ct.load(X, index=(bid,), shape=(TILE,))
        ct.store(Y, index=(bid,), tile=x * 2)


    def scale(x, y, stream):
        tile = next_power_of_2(1000)
        ct.launch(stream, (ct.cdiv(x.shape[0], tile),), _scale_kernel, (x, y, tile))


    CAPTURE_SPECS = {"_scale_kernel": {"X": "f32[1048576]", "Y": "f32[1048576]", "TILE": 1024}}
''')


def make_package(tmp_path: Path, name: str) -> Path:
    """<tmp>/src/<name>/ops/cutile/scale.py importing ``from .utils import next_power_of_2``."""
    pkg = tmp_path / "src" / name
    ops = pkg / "ops" / "cutile"
    ops.mkdir(parents=True)
    for d in (pkg, pkg / "ops", ops):
        (d / "__init__.py").write_text("")
    (ops / "utils.py").write_text("def next_power_of_2(n):\n    return 1 << (n - 1).bit_length()\n")
    (ops / "scale.py").write_text(KERNEL)
    return ops / "scale.py"


def test_package_name_walks_up_init_folders(tmp_path):
    f = make_package(tmp_path, "pkg_walk")
    assert package_name(f) == ((tmp_path / "src").resolve(), "pkg_walk.ops.cutile.scale")
    loose = tmp_path / "loose.py"
    loose.write_text("x = 1\n")
    assert package_name(loose) is None


def test_relative_import_loads_as_part_of_the_package(tmp_path):
    f = make_package(tmp_path, "pkg_rel")
    module = import_file(f)
    assert module.__name__ == "pkg_rel.ops.cutile.scale" and module.next_power_of_2(1000) == 1024
    lk = load_kernel(f"{f}::_scale_kernel")
    assert lk.function_name == "_scale_kernel" and lk.constant_params() == {"TILE"}


def test_package_that_fails_to_import_falls_back_to_the_file(tmp_path):
    f = make_package(tmp_path, "pkg_broken")
    (f.parent.parent.parent / "__init__.py").write_text("import no_such_module_here\n")
    plain = f.parent / "plain.py"
    plain.write_text("import cuda.tile as ct\n\n@ct.kernel\ndef k(X):\n    pass\n")
    assert import_file(plain).__name__.startswith("_cutile_diag_user_plain_")
    # with a relative import there is no standalone fallback: the package's own error is reported
    from cutile_diag.errors import KernelLoadError
    with pytest.raises(KernelLoadError, match="no_such_module_here"):
        import_file(f)


def test_capture_and_plan_of_a_package_kernel(tmp_path, capsys):
    f = make_package(tmp_path, "pkg_cli")
    ref = f"{f}::_scale_kernel"
    rc = main(["capture", ref, "--out", str(tmp_path / "cap"), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    (cap,) = json.loads(out)["captures"]
    assert (Path(cap["path"]) / "kernel.tileir").is_file()
    # --plan captures in a child process (a fresh interpreter): the package import must work there too
    rc = main(["optimize", ref, "--plan", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["capture"]["ok"], plan["capture"]["error"]
    assert plan["location"]["kernels"][0]["constants"] == ["TILE"]
