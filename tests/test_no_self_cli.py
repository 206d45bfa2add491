"""No module of src/ runs the tool's own CLI: a child is a typed entry point (``python -m
cutile_diag.<module> JOB RESULT``, errors as data), never ``cutile_diag <command>`` whose flags and
error text the parent would have to know (issue 33)."""
import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cutile_diag"
RUNNERS = {"run", "Popen", "call", "check_call", "check_output", "system", "popen", "spawn"}
# `-m cutile_diag` then a word that is not `.submodule`: the CLI with a command
CLI_TEXT = re.compile(r"-m\s+cutile_diag(?![.\w])\s+\S")


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` (``"-m", CHILD``)."""
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets if isinstance(t, ast.Name)}


def _text(node, consts: dict[str, str]) -> str | None:
    """A node's string value where it is known ({} for an f-string's placeholders)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _is_prog(node) -> bool:
    """``prog()`` (how the user runs the tool), alone or opening an f-string."""
    if isinstance(node, ast.JoinedStr) and node.values:
        node = node.values[0].value if isinstance(node.values[0], ast.FormattedValue) else None
    return isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "prog"


def cli_runs(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` runs cutile-diag's CLI."""
    tree = ast.parse(source)
    consts = _constants(tree)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            words = [_text(e, consts) for e in node.elts]
            if words[0] == "cutile-diag" or (isinstance(node.elts[0], ast.Call) and _is_prog(node.elts[0])):
                hits.append((node.lineno, "cutile-diag as argv[0]"))
            for i, w in enumerate(words[:-2]):
                if w == "-m" and words[i + 1] == "cutile_diag":
                    hits.append((node.lineno, "-m cutile_diag with a command"))
        elif isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in docs:
            text = _text(node, consts)
            if text is not None and CLI_TEXT.search(text):
                hits.append((node.lineno, f"a command line: {text[:60]!r}"))
        elif isinstance(node, ast.Call) and node.args and \
                getattr(node.func, "attr", getattr(node.func, "id", None)) in RUNNERS:
            first = node.args[0]
            text = _text(first, consts) or ""
            if _is_prog(first) or text.split()[:1] == ["cutile-diag"]:
                hits.append((node.lineno, "runs cutile-diag"))
    return hits


def test_src_never_runs_its_own_cli():
    found = [f"{p.relative_to(SRC)}:{line}: {what}" for p in sorted(SRC.rglob("*.py"))
             for line, what in cli_runs(p.read_text())]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("snippet", [
    # what loop/integrations.py ran before the capture child
    'argv = [sys.executable, "-m", "cutile_diag", "capture", f"{kernel_file}::{kernel}", "--out", str(out_dir),\n'
    '        "--name", name, "--json"]',
    'proc.run([sys.executable, "-m", "cutile_diag", *args])',
    'PKG = "cutile_diag"\nsubprocess.run([sys.executable, "-m", PKG, "capture", ref])',
    'subprocess.run(["cutile-diag", "capture", ref])',
    'subprocess.run([prog(), "capture", ref])',
    'subprocess.run(f"{prog()} capture {ref}", shell=True)',
    'proc.run("cutile-diag capture x.py::k", shell=True)',
    'cmd = f"{sys.executable} -m cutile_diag capture {ref} --json"',
])
def test_the_scan_flags_each_way_to_run_the_cli(snippet):
    assert cli_runs(snippet)


@pytest.mark.parametrize("snippet", [
    'proc.run([sys.executable, "-m", "cutile_diag.loop.capture_child", str(job), str(res)])',
    'CHILD = "cutile_diag.measure.child"\nsubprocess.Popen([sys.executable, "-m", CHILD, req, out])',
    'hint = f"run `{prog()} capture {ref}` to see the IR"',          # a hint the user reads
    'steps = [(f"{prog()} ir-diff a b --html diff.html", "the full diff as a page")]',
    'def f():\n    """Runs like ``python -m cutile_diag capture``, once."""',
    'return f"{shlex.quote(sys.executable)} -m cutile_diag"',
])
def test_the_scan_lets_typed_entry_points_and_hints_pass(snippet):
    assert not cli_runs(snippet)
