"""The capture CLI: AOT, run mode, cache mining, and one-line errors for bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cutile_diag.cli import main
from cutile_diag.examples import EXAMPLES_DIR

MATMUL = f"{EXAMPLES_DIR / 'matmul.py'}::matmul"


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_aot_cli_json_with_specs_two_archs(capsys, tmp_path):
    code, out, err = run_cli(capsys, "capture", MATMUL, "--arch", "sm_90", "--arch", "sm_100",
                             "--arg", "A=f16[M,K]", "--arg", "B=f16[K,N]", "--arg", "C=f16[M,N]",
                             "--arg", "TM=64", "--arg", "TN=128", "--arg", "TK=32",
                             "--out", str(tmp_path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    (cap,) = doc["captures"]
    assert cap["targets"] == ["sm_100", "sm_90"]
    assert cap["symbol"].endswith("_I64_I128_I32")
    m = json.loads((Path(cap["path"]) / "manifest.json").read_text())
    assert m["signature"]["spec"]["A"] == "f16[M,K]"


def test_aot_cli_rich_output(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "capture", MATMUL, "--out", str(tmp_path))
    assert code == 0
    assert "matmul" in out and "SM90" in out and "TMA" in out


BAD = [
    (["capture", "nosuch.py::k"], "no such file"),
    (["capture", f"{EXAMPLES_DIR / 'matmul.py'}::nope"], "no kernel named 'nope'"),
    (["capture", f"{EXAMPLES_DIR / 'matmul.py'}::launch"], "not a @ct.kernel"),
    (["capture", MATMUL, "--arch", "sm_42"], "supported: sm_80"),
    (["capture", MATMUL, "--arg", "A=f99[4]"], "unknown dtype 'f99'"),
    (["capture", MATMUL, "--arg", "Q=f16[4]"], "has no parameter Q"),
    (["capture", MATMUL, "--arg", "A=f16[M,K]", "--arg", "B=f16[K,N]", "--arg", "C=f16[M,N]",
      "--arg", "TM=f16", "--arg", "TN=1", "--arg", "TK=1"], "is a ct.Constant"),
    (["capture", MATMUL, "--arg", "A=128", "--arg", "B=f16[K,N]", "--arg", "C=f16[M,N]",
      "--arg", "TM=64", "--arg", "TN=64", "--arg", "TK=64"], "is not a ct.Constant"),
    (["capture", MATMUL, "--hint", "warps=4"], "unknown kernel hint warps"),
    (["capture"], "nothing to capture"),
    (["capture", "--from-cache", "/nonexistent/cache"], "no cuTile cache database"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[b[1] for b in BAD])
def test_bad_input_one_line_exit_2(capsys, tmp_path, argv, needle):
    code, out, err = run_cli(capsys, *argv, "--out", str(tmp_path))
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("cutile-diag: error:"), err
    assert needle in lines[0]
    assert "Traceback" not in err


def test_arg_overrides_one_shipped_spec(capsys, tmp_path):
    code, out, err = run_cli(capsys, "capture", MATMUL, "--arg", "TM=64", "--out", str(tmp_path), "--json")
    assert code == 0, err
    (cap,) = json.loads(out)["captures"]
    spec = json.loads((Path(cap["path"]) / "manifest.json").read_text())["signature"]["spec"]
    assert spec["TM"] == "64" and spec["TN"] == "128" and spec["A"].startswith("f16[")  # rest: CAPTURE_SPECS


def test_missing_specs_without_shipped_defaults(capsys, tmp_path):
    src = tmp_path / "plain_kernel.py"
    src.write_text(textwrap.dedent("""\
        import cuda.tile as ct

        @ct.kernel
        def copy(a, b, TILE: ct.Constant[int]):
            ct.store(b, index=(ct.bid(0),), tile=ct.load(a, index=(ct.bid(0),), shape=(TILE,)))
        """))
    code, _, err = run_cli(capsys, "capture", f"{src}::copy", "--arg", "a=f32[1024]", "--out", str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no spec for parameters b, TILE" in err and "Traceback" not in err


def test_cutile_type_error_points_at_python_line(capsys, tmp_path):
    src = tmp_path / "bad_kernel.py"
    src.write_text(textwrap.dedent("""\
        import cuda.tile as ct

        @ct.kernel
        def bad(a, b, TILE: ct.Constant[int]):
            t = ct.load(a, index=(ct.bid(0),), shape=(TILE,))
            u = t + "x"
            ct.store(b, index=(ct.bid(0),), tile=u)
        """))
    code, _, err = run_cli(capsys, "capture", f"{src}::bad", "--arg", "a=f32[1024]", "--arg", "b=f32[1024]",
                           "--arg", "TILE=128", "--out", str(tmp_path / "o"))
    assert code == 2
    assert f"{src}:6:" in err and "TypeCheckingError" in err
    assert not (tmp_path / "o" / "bad").exists()


def test_file_that_raises_on_import(capsys, tmp_path):
    src = tmp_path / "boom.py"
    src.write_text("import cuda.tile as ct\nraise RuntimeError('boom at import')\n")
    code, _, err = run_cli(capsys, "capture", f"{src}::k", "--out", str(tmp_path))
    assert code == 2 and f"{src}:2" in err and "boom at import" in err


# --- run mode: a script that compiles through cuTile's own path (export to cubin stands in
# for a JIT launch on a CPU: same bytecode dump, same tileiras flags, same disk cache).
EXPORT_SCRIPT = """\
import sys
from cutile_diag.capture import loader, spec
from cuda.tile.compilation import export_kernel
for ref in sys.argv[1:]:
    lk = loader.load_kernel(ref)
    b = spec.bind(lk, {k: spec.parse_spec(v) for k, v in lk.module.CAPTURE_SPECS[lk.attr].items()})
    export_kernel(lk.kernel, [spec.build_signature(b)], "/dev/null", gpu_code="sm_90", output_format="cubin")
print("compiled", len(sys.argv) - 1)
"""


@pytest.fixture
def export_script(tmp_path):
    p = tmp_path / "compile_examples.py"
    p.write_text(EXPORT_SCRIPT)
    return p


def test_run_mode_collects_every_kernel_compiled(capsys, tmp_path, export_script):
    out = tmp_path / "out"
    refs = [f"{EXAMPLES_DIR / 'vector_add.py'}::vector_add", MATMUL]
    code, stdout, err = run_cli(capsys, "capture", "--out", str(out), "--json", "--",
                                sys.executable, str(export_script), *refs)
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["returncode"] == 0
    names = sorted(c["name"] for c in doc["captures"])
    assert names == ["matmul", "vector_add"]
    for cap in doc["captures"]:
        m = json.loads((Path(cap["path"]) / "manifest.json").read_text())
        t = m["targets"]["sm_90"]
        assert m["kernel"]["mode"] == "run"
        assert t["cubin_source"] == "jit"         # the cubin the compile produced, matched by cache key
        assert t["opt_level"] == 3
        assert (Path(cap["path"]) / "sm_90" / "remarks.yaml").read_text().strip()
        assert t["facts"]["registers"] > 0


def test_run_mode_failing_command_writes_nothing(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "capture", "--out", str(out), "--",
                           sys.executable, "-c", "import sys; print('working'); sys.exit(3)")
    assert code == 2 and "exited with 3" in err and "no capture written" in err
    assert not out.exists() or not any(out.iterdir())


def test_run_mode_timeout_kills(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "capture", "--out", str(out), "--timeout", "1", "--",
                           sys.executable, "-c", "import time; time.sleep(60)")
    assert code == 2 and "timed out after 1 s" in err


def test_run_mode_unknown_command(capsys, tmp_path):
    code, _, err = run_cli(capsys, "capture", "--out", str(tmp_path), "--", "definitely-not-a-command-xyz")
    assert code == 2 and "command not found" in err


def test_from_cache_mines_embedded_tileir(capsys, tmp_path, export_script):
    cache = tmp_path / "cache"
    env = dict(os.environ, CUDA_TILE_CACHE_DIR=str(cache))
    subprocess.run([sys.executable, str(export_script), MATMUL], env=env, check=True, capture_output=True)
    code, stdout, err = run_cli(capsys, "capture", "--from-cache", str(cache), "--out", str(tmp_path / "o"), "--json")
    assert code == 0, err
    (cap,) = json.loads(stdout)["captures"]
    p = Path(cap["path"])
    assert cap["name"] == "matmul" and cap["targets"] == ["sm_90"]
    text = (p / "kernel.tileir").read_text()
    assert text.startswith("entry @matmul_K") and "mmaf" in text
    m = json.loads((p / "manifest.json").read_text())
    assert m["kernel"]["mode"] == "cache" and m["targets"]["sm_90"]["opt_level"] is None
    assert m["targets"]["sm_90"]["facts"]["remarks"]["tensor_core_mma"] >= 1


def test_missing_tool_names_its_package(capsys, tmp_path, monkeypatch):
    from cutile_diag import toolchain
    monkeypatch.setattr(toolchain, "_pip_bin_dirs", lambda: [])
    monkeypatch.setenv("PATH", str(tmp_path))
    toolchain.find_tool.cache_clear()
    try:
        code, _, err = run_cli(capsys, "capture", f"{EXAMPLES_DIR / 'vector_add.py'}::vector_add",
                               "--out", str(tmp_path / "o"))
    finally:
        toolchain.find_tool.cache_clear()
    assert code == 2
    assert "not found" in err and ("nvidia-cuda-" in err) and "Traceback" not in err
    assert not (tmp_path / "o" / "vector_add").exists()
