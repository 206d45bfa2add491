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


def test_summary_names_the_kernel_and_the_capture_name_where_it_differs(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "capture", MATMUL, "--name", "gemm_a", "--out", str(tmp_path))
    assert code == 0
    row = next(ln for ln in out.splitlines() if "sm_90" in ln and "gemm_a" in ln)
    assert row.split()[:3] == ["matmul", "as", "gemm_a"]
    code, out, _ = run_cli(capsys, "capture", MATMUL, "--name", "gemm_a", "--out", str(tmp_path / "j"), "--json")
    c = json.loads(out)["captures"][0]
    assert (c["name"], c["kernel"], c["summary"]["kernel"]) == ("gemm_a", "matmul", "matmul")


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


def test_a_new_parameter_missing_from_capture_specs_says_where_its_spec_goes(capsys, tmp_path):
    """An edit added a parameter to a kernel that ships CAPTURE_SPECS (inside the loop, `loop
    record` takes no --arg): the hint names the table entry to extend, with the parameter's kind."""
    src = tmp_path / "grown.py"
    src.write_text((EXAMPLES_DIR / "vector_add.py").read_text().replace(
        "def vector_add(a, b, c, TILE", "def vector_add(a, b, c, n, TILE"))
    code, _, err = run_cli(capsys, "capture", f"{src}::vector_add", "--out", str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no spec for parameter n of vector_add (add n to CAPTURE_SPECS['vector_add'] in grown.py: " \
           "n=DTYPE (scalar: i32, f32, ...)" in err


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
    _remove_kept(err)


def test_run_mode_timeout_kills(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "capture", "--out", str(out), "--timeout", "1", "--",
                           sys.executable, "-c", "import time; time.sleep(60)")
    assert code == 2 and "timed out after 1 s" in err
    _remove_kept(err)


def _remove_kept(err: str) -> None:
    """The raw dumps a failed run keeps (and names) for the user; not for the test machine."""
    import re
    import shutil
    m = re.search(r"kept in (\S+?)\)", err)
    assert m and Path(m.group(1), "dump").is_dir(), err
    shutil.rmtree(m.group(1))


def test_run_mode_unknown_command(capsys, tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # where the run's work dir goes
    code, _, err = run_cli(capsys, "capture", "--out", str(tmp_path / "o"), "--", "definitely-not-a-command-xyz")
    assert code == 2 and "command not found" in err
    assert list(tmp_path.iterdir()) == []          # no work dir left behind unmentioned


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


# --- bad input that used to escape as a traceback or be accepted
VADD = f"{EXAMPLES_DIR / 'vector_add.py'}::vector_add"


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("cutile-diag: error:"), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("extra,needle", [
    (["--out", "{tmp}/afile"], "exists and is not a folder"),
    (["--out", "{tmp}/afile/x"], "is a file, not a folder"),
    (["--out", "{tmp}/o", "--name", "a/b"], "bad capture name 'a/b'"),
    (["--out", "{tmp}/o", "--name", "../x"], "bad capture name '../x'"),
    (["--out", "{tmp}/o", "--name", ".x"], "bad capture name '.x'"),
    (["--out", "{tmp}/o", "--timeout", "-1"], "--timeout must be a positive number"),
    (["--out", "{tmp}/o", "--timeout", "0"], "--timeout must be a positive number"),
    (["--out", "{tmp}/o", "--limit", "2"], "--limit applies only to --from-cache"),
])
def test_bad_out_name_and_numbers(capsys, tmp_path, extra, needle):
    (tmp_path / "afile").write_text("")
    code, _, err = run_cli(capsys, "capture", VADD, *[a.format(tmp=tmp_path) for a in extra])
    assert code == 2 and needle in _one_error_line(err)
    assert not (tmp_path / "o").exists()       # nothing created for rejected input


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_from_cache_rejects_non_positive_limit(capsys, tmp_path, limit):
    code, _, err = run_cli(capsys, "capture", "--from-cache", str(tmp_path), "--limit", limit,
                           "--out", str(tmp_path / "o"))
    assert code == 2 and "--limit must be a positive integer" in _one_error_line(err)


def test_missing_ptxas_is_named_up_front(capsys, tmp_path, monkeypatch):
    """tileiras runs ptxas: without it cuTile's version probe only warns and fails later with a
    misleading message, so the capture checks first and names the package."""
    from cutile_diag import toolchain
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("tileiras", "tileirdisasm", "cuobjdump"):
        (bin_dir / tool).symlink_to(toolchain.find_tool(tool))
    monkeypatch.setattr(toolchain, "_pip_bin_dirs", lambda: [bin_dir])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    toolchain.find_tool.cache_clear()
    try:
        code, _, err = run_cli(capsys, "capture", VADD, "--out", str(tmp_path / "o"))
    finally:
        toolchain.find_tool.cache_clear()
    line = _one_error_line(err)
    assert code == 2 and "'ptxas' not found" in line and "nvidia-cuda-nvcc" in line
    assert not (tmp_path / "o").exists()


def test_cutile_warnings_do_not_reach_stderr(capsys, tmp_path, monkeypatch):
    import warnings
    import cuda.tile.compilation as comp
    from cuda.tile import TileError

    def export_with_failed_probe(*_a, **_k):
        warnings.warn("Failed to detect the maximum supported TileIR bytecode version; falling back to 13.1.")
        raise TileError("bytecode feature requires version 13.3 or later, but got 13.1")
    monkeypatch.setattr(comp, "export_kernel", export_with_failed_probe)
    code, _, err = run_cli(capsys, "capture", VADD, "--out", str(tmp_path / "o"))
    assert code == 2 and "could not run tileiras" in _one_error_line(err)


def test_aot_timeout_applies_to_tileiras_and_names_the_arch(capsys, tmp_path):
    code, _, err = run_cli(capsys, "capture", MATMUL, "--arch", "sm_100", "--timeout", "0.01",
                           "--out", str(tmp_path / "o"))
    line = _one_error_line(err)
    assert code == 2 and "for sm_100" in line and "timed out after 0.01 s" in line
    assert not (tmp_path / "o").exists()


def test_kernel_printing_at_import_keeps_json_clean(capsys, tmp_path):
    src = tmp_path / "noisy.py"
    src.write_text(textwrap.dedent("""\
        import cuda.tile as ct
        print("hello from import")

        @ct.kernel
        def copy(a, b, TILE: ct.Constant[int]):
            ct.store(b, index=(ct.bid(0),), tile=ct.load(a, index=(ct.bid(0),), shape=(TILE,)))
        """))
    code, out, err = run_cli(capsys, "capture", f"{src}::copy", "--arg", "a=f32[1024]", "--arg", "b=f32[1024]",
                             "--arg", "TILE=128", "--out", str(tmp_path / "o"), "--json")
    assert code == 0, err
    assert json.loads(out)["captures"][0]["name"] == "copy"
    assert "hello from import" in err


@pytest.fixture
def crashing_cuobjdump(tmp_path, monkeypatch):
    from cutile_diag import toolchain
    crash = tmp_path / "cuobjdump-crash"
    crash.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crash.chmod(0o755)
    monkeypatch.setenv("CUTILE_DIAG_CUOBJDUMP", str(crash))
    toolchain.find_tool.cache_clear()
    yield
    toolchain.find_tool.cache_clear()


def test_failed_tool_marks_capture_incomplete(capsys, tmp_path, crashing_cuobjdump):
    out = tmp_path / "o"
    code, stdout, err = run_cli(capsys, "capture", VADD, "--out", str(out), "--json")
    line = _one_error_line(err)
    assert code == 1 and "capture incomplete" in line and "killed by SIGSEGV" in line
    (cap,) = json.loads(stdout)["captures"]      # the JSON still describes what is there
    assert cap["incomplete"] == ["sm_90/kernel.sass", "sm_90/resource-usage.txt"]
    assert cap["per_arch"]["sm_90"]["missing"] == ["kernel.sass", "resource-usage.txt"]
    m = json.loads((out / "vector_add" / "manifest.json").read_text())
    assert m["incomplete"] == cap["incomplete"]
    assert m["targets"]["sm_90"]["missing"] == ["kernel.sass", "resource-usage.txt"]
    code, stdout, err = run_cli(capsys, "capture", VADD, "--out", str(out), "--allow-incomplete")
    assert code == 0 and "incomplete" in stdout and not err.strip()


def test_complete_capture_says_so(capsys, tmp_path):
    code, stdout, _ = run_cli(capsys, "capture", VADD, "--out", str(tmp_path), "--json")
    doc = json.loads(stdout)
    assert code == 0 and doc["complete"] is True and doc["captures"][0]["incomplete"] == []


def test_json_has_facts_for_every_arch(capsys, tmp_path):
    code, stdout, err = run_cli(capsys, "capture", MATMUL, "--arch", "sm_90", "--arch", "sm_100",
                                "--out", str(tmp_path), "--json")
    assert code == 0, err
    per = json.loads(stdout)["captures"][0]["per_arch"]
    assert set(per) == {"sm_90", "sm_100"}
    assert per["sm_90"]["tensor_core"] == ["Tensor-core SM90"]
    assert per["sm_100"]["tensor_core"] == ["Tensor-core SM100"]
    for f in per.values():
        assert f["registers"] > 0 and f["shared"] > 0 and f["spill_bytes"] == 0
        assert f["tma_loads"] == 2 and f["tma_stores"] == 1


def test_run_mode_nothing_compiled_is_an_error(capsys, tmp_path):
    script = "print('child says [bold]hi[/]')"
    code, stdout, err = run_cli(capsys, "capture", "--out", str(tmp_path / "o"), "--json", "--",
                                sys.executable, "-c", script)
    assert code == 1 and "no kernels captured" in _one_error_line(err) and not stdout.strip()
    code, stdout, err = run_cli(capsys, "capture", "--out", str(tmp_path / "o"), "--", sys.executable, "-c", script)
    lines = err.splitlines()
    assert code == 1 and lines[-1].startswith("cutile-diag: error: no kernels captured")
    assert "│ child says [bold]hi[/]" in err and "[dim]" not in err     # echoed verbatim, no markup
    assert not (tmp_path / "o").exists()


def test_from_cache_empty_cache_is_an_error(capsys, tmp_path):
    import sqlite3
    cache = tmp_path / "cache"
    cache.mkdir()
    with sqlite3.connect(cache / "cache.db") as db:
        db.execute("CREATE TABLE cache(key TEXT PRIMARY KEY, blob BLOB, blob_size INTEGER, atime REAL, metadata TEXT)")
    for extra in ([], ["--json"]):
        code, stdout, err = run_cli(capsys, "capture", "--from-cache", str(cache), "--out", str(tmp_path / "o"), *extra)
        assert code == 1 and "holds no entries" in _one_error_line(err) and not stdout.strip()


# --- all-or-nothing for multi-kernel captures
@pytest.fixture(scope="module")
def two_kernel_cache(tmp_path_factory):
    """A cuTile disk cache holding two compiled example kernels."""
    d = tmp_path_factory.mktemp("cache2")
    script = d / "compile_examples.py"
    script.write_text(EXPORT_SCRIPT)
    env = dict(os.environ, CUDA_TILE_CACHE_DIR=str(d / "cache"))
    subprocess.run([sys.executable, str(script), VADD, f"{EXAMPLES_DIR / 'vector_add.py'}::vector_add_persistent"],
                   env=env, check=True, capture_output=True)
    return d / "cache"


def _fail_second_write(monkeypatch):
    from cutile_diag.capture import artifacts
    from cutile_diag.errors import ToolFailedError
    real, calls = artifacts.write_capture, []

    def write(*a, **k):
        calls.append(a[1].name)
        if len(calls) == 2:
            raise ToolFailedError("cuobjdump exited with 1: injected")
        return real(*a, **k)
    monkeypatch.setattr(artifacts, "write_capture", write)
    return calls


def test_from_cache_is_all_or_nothing_and_names_the_entry(capsys, tmp_path, monkeypatch, two_kernel_cache):
    out = tmp_path / "o"
    calls = _fail_second_write(monkeypatch)
    code, _, err = run_cli(capsys, "capture", "--from-cache", str(two_kernel_cache), "--out", str(out))
    line = _one_error_line(err)
    assert code == 2 and "injected" in line and "nothing written" in line
    assert "cache entry " in line and f"({calls[1]}_K" in line      # which entry failed
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []   # no staging left


def test_from_cache_progress_and_unavailable_files(tmp_path, two_kernel_cache):
    from cutile_diag.capture.run_mode import capture_from_cache
    steps: list[str] = []
    caps = capture_from_cache(two_kernel_cache, out_dir=tmp_path / "o", on_step=steps.append)
    assert sorted(c.name for c in caps) == ["vector_add", "vector_add_persistent"]
    assert [s.split(" (")[-1] for s in steps] == ["1/2)", "2/2)"]
    for c in caps:
        assert set(c.manifest["unavailable"]) == {"kernel.tileirbc", "kernel.loc.tileir"}
        assert c.manifest["incomplete"] == [] and c.path.parent == tmp_path / "o"


def test_run_mode_is_all_or_nothing_and_names_the_dump(capsys, tmp_path, monkeypatch, export_script):
    import re
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)        # an earlier capture in --out stays as it was
    _fail_second_write(monkeypatch)
    code, _, err = run_cli(capsys, "capture", "--out", str(out), "--json", "--",
                           sys.executable, str(export_script), VADD, MATMUL)
    line = _one_error_line(err)
    assert code == 2 and re.search(r"capturing dump vector_add\.\S+\.tileirbc failed", line), line
    assert "nothing written" in line
    assert sorted(p.name for p in out.iterdir()) == ["keep"]
    _remove_kept(line)                          # asserts the raw dumps it points at exist
