"""``Evaluation`` is given its collaborator (``Steps``) and declares the state it reads: nothing in
evaluate.py calls a method only the runner happens to define (issue 33)."""
import ast
import inspect

from cutile_diag.loop import evaluate
from cutile_diag.loop.evaluate import Evaluation, Steps
from cutile_diag.loop.runner import Runner


def _reads(cls_node: ast.ClassDef, base: str) -> set[str]:
    """The attributes read on ``base`` (``self`` or ``self.steps``) in the class's methods."""
    return {n.attr for n in ast.walk(cls_node) if isinstance(n, ast.Attribute) and ast.unparse(n.value) == base}


def _evaluation_node() -> ast.ClassDef:
    tree = ast.parse(inspect.getsource(evaluate))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Evaluation")


def test_evaluation_reads_only_what_it_declares():
    node = _evaluation_node()
    init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    own = set(dir(Evaluation)) | set(Evaluation.__annotations__) | _assigned(init)
    assert _reads(node, "self") - own == set()


def _assigned(fn: ast.FunctionDef) -> set[str]:
    return {t.attr for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"}


def test_every_step_evaluation_asks_for_is_in_the_contract():
    asked = _reads(_evaluation_node(), "self.steps")
    assert asked == set(Steps.__abstractmethods__)
    for name in asked:              # each says what it must do
        assert (getattr(Steps, name).__doc__ or "").strip(), name


def test_the_runner_is_the_evaluations_steps():
    assert issubclass(Runner, Steps) and not Runner.__abstractmethods__
