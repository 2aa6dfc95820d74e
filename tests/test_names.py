"""Name resolution on ``ast`` (ampmigrate.engine.names): every import form the rules resolve."""

from __future__ import annotations

import ast
import textwrap

import pytest

from ampmigrate.engine.names import Names


def _resolve(code: str, expr: str, nth: int = 0) -> set[str]:
    """The qualified names of the ``nth`` occurrence of the expression spelled ``expr``."""
    tree = ast.parse(textwrap.dedent(code))
    names = Names(tree)
    found = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Name | ast.Attribute) and ast.unparse(n) == expr
    ]
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    return names.qualified(found[nth])


@pytest.mark.parametrize(
    ("code", "expr", "expected"),
    [
        (
            "import torch as th\nth.cuda.amp.autocast()",
            "th.cuda.amp.autocast",
            "torch.cuda.amp.autocast",
        ),
        ("from torch.cuda import amp\namp.autocast()", "amp.autocast", "torch.cuda.amp.autocast"),
        ("import torch.cuda.amp as A\nA.GradScaler", "A.GradScaler", "torch.cuda.amp.GradScaler"),
        ("from torch.cuda.amp import autocast as ac\nac()", "ac", "torch.cuda.amp.autocast"),
        (
            "import torch.cuda.amp\ntorch.cuda.amp.autocast()",
            "torch.cuda.amp.autocast",
            "torch.cuda.amp.autocast",
        ),
        (
            "import torch\nimport torch.cuda.amp\ntorch.nn.Linear",
            "torch.nn.Linear",
            "torch.nn.Linear",
        ),
        (
            "def f():\n    from torch.cuda import amp\n    return amp.autocast()",
            "amp.autocast",
            "torch.cuda.amp.autocast",
        ),
        (
            "from torch.cuda.amp import autocast\nclass C:\n    x = autocast()",
            "autocast",
            "torch.cuda.amp.autocast",
        ),
        (
            "from torch.cuda.amp import autocast\nclass C:\n    def f(self):\n        autocast()",
            "autocast",
            "torch.cuda.amp.autocast",
        ),
        ("isinstance(x, int)", "isinstance", "builtins.isinstance"),
        ("import functools\nfunctools.partial", "functools.partial", "functools.partial"),
        ("from . import amp\namp.autocast", "amp.autocast", ".amp.autocast"),
        (  # `global` holds for the whole function, also for an import written above it
            "class M:\n    def setup(self):\n        from apex import amp\n        global amp\n"
            "    def step(self):\n        amp.scale_loss",
            "amp.scale_loss",
            "apex.amp.scale_loss",
        ),
    ],
)
def test_import_forms(code: str, expr: str, expected: str) -> None:
    assert _resolve(code, expr) == {expected}


def test_alternatives_are_a_set() -> None:
    code = """
    try:
        from torch.amp import autocast
    except ImportError:
        from torch.cuda.amp import autocast
    autocast("cuda")
    """
    assert _resolve(code, "autocast") == {"torch.amp.autocast", "torch.cuda.amp.autocast"}
    gated = """
    if new_torch:
        import torch.amp as amp
    else:
        from torch.cuda import amp
    amp.GradScaler()
    """
    assert _resolve(gated, "amp.GradScaler") == {
        "torch.amp.GradScaler",
        "torch.cuda.amp.GradScaler",
    }


def test_apex_is_not_apex_amp_and_torch_amp_is_not_apex() -> None:
    assert _resolve("import apex as amp\namp.autocast()", "amp.autocast") == {"apex.autocast"}
    assert _resolve("from torch.cuda import amp\namp.initialize()", "amp.initialize") == {
        "torch.cuda.amp.initialize"
    }
    assert _resolve("from apex import amp\namp.initialize()", "amp.initialize") == {
        "apex.amp.initialize"
    }


def test_shadowing_and_scopes() -> None:
    # A parameter shadows the module.
    code = "import torch\ndef make(torch):\n    return torch.cuda.amp.GradScaler()"
    assert _resolve(code, "torch.cuda.amp.GradScaler") == {
        "make.<locals>.torch.cuda.amp.GradScaler"
    }
    # A class body is invisible to the methods in it.
    code = """
    from torch.cuda.amp import autocast
    class C:
        autocast = None
        def f(self):
            return autocast()
    """
    assert _resolve(code, "autocast", 1) == {"torch.cuda.amp.autocast"}
    # `global` binds in the module.
    code = """
    def setup():
        global amp
        from apex import amp
    def step():
        amp.scale_loss()
    """
    assert _resolve(code, "amp.scale_loss") == {"apex.amp.scale_loss"}
    # A plain name sees only what is bound before it in its own scope...
    code = "from torch.cuda.amp import autocast\nautocast()\nautocast = None\nautocast()"
    assert _resolve(code, "autocast", 0) == {"torch.cuda.amp.autocast"}
    assert _resolve(code, "autocast", 2) == {"torch.cuda.amp.autocast", "autocast"}
    # ... an attribute chain every binding of its root (as libcst did).
    code = "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\namp.initialize()"
    assert _resolve(code, "amp.initialize") == {"apex.amp.initialize", "amp.initialize"}


def test_decorators_and_defaults_resolve_outside() -> None:
    code = """
    from torch.cuda.amp import custom_fwd
    def f(custom_fwd=custom_fwd):
        pass
    @custom_fwd
    def g(custom_fwd):
        pass
    """
    assert _resolve(code, "custom_fwd", 0) == {"torch.cuda.amp.custom_fwd"}  # the default
    assert _resolve(code, "custom_fwd", 1) == {"torch.cuda.amp.custom_fwd"}  # the decorator


def test_import_edits_and_bindings() -> None:
    tree = ast.parse(
        "import torch.cuda.amp as A\nfrom torch.cuda import amp\nA.autocast\namp.autocast"
    )
    names = Names(tree)
    a_ref, amp_ref = tree.body[2].value, tree.body[3].value
    assert [e.module for e in names.import_edits(a_ref)] == ["torch.cuda.amp"]
    assert [(e.module, e.obj) for e in names.import_edits(amp_ref)] == [("torch.cuda", "amp")]
    assert names.is_bound(amp_ref, "amp") and not names.is_bound(amp_ref, "functools")
    assert names.qualified_text(amp_ref, "torch") == set()
    assert [b.node for b in names.bindings(amp_ref.value)] == [tree.body[1]]
    assert names.parent(amp_ref) is tree.body[3] and names.scope(amp_ref) is tree


def _libcst_names(data: bytes) -> dict[tuple, set[str]]:
    """libcst's names on the scopes the apex planner uses: libcst's own, but for an import
    declared ``global`` after it, read as CPython does (tests/test_apex_metadata.py)."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from ampmigrate.cstnames import scopes

    module = cst.parse_module(data)
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    out = {}
    for node, scope in scopes(module).items():
        if isinstance(node, cst.Name | cst.Attribute) and scope is not None and node in positions:
            p = positions[node]
            key = (type(node).__name__, p.start.line, p.start.column, p.end.line, p.end.column)
            out[key] = {q.name for q in scope.get_qualified_names_for(node)}
    return out


def test_same_answers_as_libcst_on_the_fixtures() -> None:
    """What the rules were snapshotted with: libcst's ``get_qualified_names_for``."""
    from ampmigrate.engine.source import Source

    from conftest import FIXTURES

    compared = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        data = path.read_bytes()
        source, tree = Source.from_bytes(data), ast.parse(data)
        names = Names(tree)
        expected = _libcst_names(data)
        for node in names.nodes():
            if isinstance(node, ast.Name | ast.Attribute):
                line, col, end_line, end_col = source.position(node)
                key = (type(node).__name__, line, col - 1, end_line, end_col - 1)
                if key in expected:
                    assert names.qualified(node) == expected[key], (path.name, key)
                    compared += 1
    assert compared > 3000


@pytest.mark.parametrize(
    ("code", "expr", "expected"),
    [
        ("import torch\ntorch.save(x)", "torch.save", True),
        ("from torch.cuda import amp as a\na.GradScaler()", "a.GradScaler", True),
        ("import os, torch as th\nos.path.join()", "os.path.join", True),  # same statement
        ("import torch\nimport numpy as np\nnp.save(x)", "np.save", False),
        ("import torch\nclass C:\n    def f(self):\n        self.step()", "self.step", False),
        ("import torch\nprint(x)", "print", False),
        ("from .torch import save\nsave(x)", "save", False),  # relative: `.torch.save`
        ("torch = load()\ntorch.save(x)", "torch.save", True),
        ("def torch():\n    save = 1\n    save(x)", "save", True),  # `torch.<locals>.save`
    ],
)
def test_may_be_in_never_rules_out_a_name_it_resolves_to(
    code: str, expr: str, expected: bool
) -> None:
    """The test that lets the scaler flow skip resolving a callee: False only where no
    qualified name is torch's."""
    tree = ast.parse(code)
    names = Names(tree)
    node = next(n for n in ast.walk(tree) if ast.unparse(n) == expr)
    assert names.may_be_in(node, "torch") is expected
    torchs = [q for q in names.qualified(node) if q == "torch" or q.startswith("torch.")]
    assert not torchs or expected


def _two_calls(code: str) -> tuple[Names, ast.Call, ast.Call]:
    tree = ast.parse(textwrap.dedent(code))
    calls = {
        n.func.id: n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    return Names(tree), calls["a"], calls["b"]


@pytest.mark.parametrize(
    ("code", "exclusive"),
    [
        # structural arms
        ("if c:\n    a()\nelse:\n    b()\n", True),
        ("if c:\n    a()\nb()\n", False),
        # one name tested against two constants, never rebound: a flag decides both
        ("impl = flag()\nif impl == 'x':\n    a()\nif impl == 'y':\n    b()\n", True),
        ("if F.dtype == 16 and F.impl == 'x':\n    a()\nif F.impl == 'y':\n    b()\n", True),
        ("def f(mode):\n    if mode == 1:\n        a()\n    if mode == 2:\n        b()\n", True),
        # the same constant, an else arm, or a name that may change between the tests: both run
        ("if impl == 'x':\n    a()\nif impl == 'x':\n    b()\n", False),
        ("if impl == 'x':\n    a()\nelse:\n    pass\nif impl != 'y':\n    b()\n", False),
        ("for impl in 'xy':\n    if impl == 'x':\n        a()\n    if impl == 'y':\n        b()\n",
         False),
        ("impl = 'x'\nif impl == 'x':\n    a()\nimpl = 'y'\nif impl == 'y':\n    b()\n", False),
        ("if F.impl == 'x':\n    a()\nF.impl = 'y'\nif F.impl == 'y':\n    b()\n", False),
        ("if g() == 'x':\n    a()\nif g() == 'y':\n    b()\n", False),
    ],
)  # fmt: skip
def test_exclusive_arms_and_contradictory_tests(code: str, exclusive: bool) -> None:
    names, first, second = _two_calls(code)
    assert names.exclusive(first, second) is exclusive
    assert names.exclusive(second, first) is exclusive


def test_an_import_the_next_import_of_the_same_name_replaces_is_never_seen() -> None:
    """cosmo-3D (the 78th review): `from apex import amp`, then `import torch.cuda.amp as amp`
    right after it: no code of the module runs between the two, so every later read is
    torch's (AMP101/AMP102 called apex's binding "a fallback" and graded their fixes unsafe).
    A rebinding under an `if`, or after other code, leaves both."""
    code = """\
        from apex import amp, optimizers
        import os
        import torch.cuda.amp as amp
        def train():
            return amp.GradScaler(), amp
        x = amp.autocast
    """
    assert _resolve(code, "amp.GradScaler") == {"torch.cuda.amp.GradScaler"}
    assert _resolve(code, "amp", nth=2) == {"torch.cuda.amp"}
    assert _resolve(code, "amp.autocast") == {"torch.cuda.amp.autocast"}
    for between in ("x = 1\n        ", "if os.environ:\n            "):
        kept = code.replace(
            "import torch.cuda.amp as amp", between + "import torch.cuda.amp as amp"
        )
        assert _resolve(kept, "amp.GradScaler") == {
            "torch.cuda.amp.GradScaler",
            "apex.amp.GradScaler",
        }, between
