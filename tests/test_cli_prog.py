"""Commands in hints, usage lines and errors read as the user runs cutile-diag: `./dev …` through
./dev, the console script's name when it is on PATH, else the interpreter running now."""
from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

import cutile_diag
from cutile_diag.cli import main
from cutile_diag.output import prog

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(cutile_diag.__file__).parent
SUBCOMMANDS = "demo|capture|ir-diff|peaks|roofline|diagnose|optimize|loop|calibrate|campaign"


def test_prog_follows_how_cutile_diag_was_started(monkeypatch, tmp_path):
    monkeypatch.setenv("CUTILE_DIAG_PROG", "./dev")
    assert prog() == "./dev"
    monkeypatch.delenv("CUTILE_DIAG_PROG")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["/x/.venv/bin/cutile-diag"])
    assert prog() == "/x/.venv/bin/cutile-diag"           # not on PATH: the script as it was started
    monkeypatch.setattr(sys, "argv", [str(SRC / "__main__.py")])
    assert prog() == f"{sys.executable} -m cutile_diag"   # python -m cutile_diag
    script = tmp_path / "cutile-diag"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert prog() == "cutile-diag"                        # the console script on PATH


def test_dev_tells_cutile_diag_how_it_was_invoked(tmp_path):
    """./dev runs the venv's console script, which is not on PATH: it exports its own name, and
    runs the command where it was called (another repository's loop, relative paths)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "cutile-diag"
    fake.write_text('#!/bin/sh\necho "prog=$CUTILE_DIAG_PROG args=$* cwd=$PWD"\n')
    fake.chmod(0o755)
    (venv / ".cutile-diag-installed").touch()            # newer than pyproject.toml: no set-up
    env = {**os.environ, "CUTILE_DIAG_VENV": str(venv)}
    out = subprocess.run(["./dev", "peaks", "--device", "h200"], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"prog=./dev args=peaks --device h200 cwd={ROOT}"
    elsewhere = tmp_path / "other-repo"
    elsewhere.mkdir()
    out = subprocess.run([str(ROOT / "dev"), "loop", "next"], cwd=elsewhere, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"prog={ROOT / 'dev'} args=loop next cwd={elsewhere}"


def _string_literals(path: Path):
    """(line, text) of the string literals that are not docstrings."""
    text = path.read_text()
    docs: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    for t in tokenize.generate_tokens(io.StringIO(text).readline):
        if t.type == tokenize.STRING and t.start[0] not in docs:
            yield t.start[0], t.string


# what names the tool without being a command to run
NOT_HINTS = {("roofline/peaks.py", "cutile-diag peaks on an NVIDIA H200"),     # a measurement's provenance
             ("loop/git.py", "# cutile-diag optimize: the loops' state"),       # a comment written to a file
             ("commands/demo.py", "cutile-diag demo: "),                         # titles
             ("diff/output/html_render.py", "cutile-diag ir-diff</"),
             ("campaign/report.py", "<title>cutile-diag campaign</title>")}


def test_no_hint_hard_codes_the_command_name():
    """Every command a message names starts with prog(): a literal `cutile-diag SUBCOMMAND` would
    print a command that is not on PATH after ./dev's set-up."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, text in _string_literals(path):
            if re.search(rf"cutile-diag ({SUBCOMMANDS})\b", text) and \
                    not any(rel == f and marker in text for f, marker in NOT_HINTS):
                found.append(f"{rel}:{line}: {text[:80]}")
    assert not found, "use f\"{prog()} …\" in these:\n" + "\n".join(found)


def test_argparse_errors_are_one_line_naming_the_subcommand_help(monkeypatch, capsys):
    monkeypatch.setenv("CUTILE_DIAG_PROG", "./dev")
    for argv, sub in ((["capture", "--bogus"], "./dev capture"), (["loop", "next", "--bogus"], "./dev loop next"),
                      (["nope"], "./dev"), (["ir-diff", "a"], "./dev ir-diff")):
        with pytest.raises(SystemExit) as ei:
            main(argv)
        assert ei.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("cutile-diag: error: "), err
        assert err[0].endswith(f"(see `{sub} --help`)")


def test_usage_line_names_the_way_it_runs(monkeypatch, capsys):
    monkeypatch.setenv("CUTILE_DIAG_PROG", "./dev")
    with pytest.raises(SystemExit):
        main(["peaks", "--help"])
    assert capsys.readouterr().out.startswith("usage: ./dev peaks")


def test_every_help_page_reads_clean(monkeypatch, capsys):
    """--help of every subcommand and loop step: exits 0, usage as the user runs it, no format
    escapes leaking (a literal '%%') and the tool's name left alone where it is not a command."""
    monkeypatch.setenv("CUTILE_DIAG_PROG", "./dev")
    pages = [[c] for c in SUBCOMMANDS.split("|")] + [["loop", s] for s in ("next", "record", "status", "recover",
                                                                            "clean")]
    for argv in pages:
        with pytest.raises(SystemExit) as ei:
            main([*argv, "--help"])
        out = capsys.readouterr().out
        assert ei.value.code == 0, argv
        assert out.startswith(f"usage: ./dev {' '.join(argv)}"), argv
        assert "%%" not in out and "./dev cannot" not in out, argv
        if argv == ["demo"]:
            assert "diagnose every kernel" in " ".join(out.split())     # it had no description at all
