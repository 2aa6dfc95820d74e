"""The apex planner's own libcst metadata (ampmigrate/apex/facts.py, ampmigrate/cstnames.py) is
libcst's, made cheaper: ``Walk`` is ParentNodeProvider's parent map with the nodes in visit
order, ``positions`` is PositionProvider's ranges, ``scopes`` is ScopeProvider's scopes. Each
is compared with the provider on every apex fixture and on layouts that move lines and columns
(CRLF and CR line ends, no final newline, tabs, wide characters, decorators, suites)."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

from ampmigrate.apex.facts import Walk, positions
from ampmigrate.cstnames import _late_globals, qualified_names, scopes

from conftest import FIXTURES

LAYOUTS = {
    "crlf": 'if x:\r\n    a = """\r\nq\r\n"""; b = 1\r\n@dec\r\n'
    "def f(a,\r\n      b): return (a +\r\n  b)\r\n",
    "cr": "x = 1\rif y: pass\rz = [\r  1,\r]\r",
    "no_final_newline": "x = (1 +\n     2)  # c\n\n\n# tail",
    "tabs_and_wide": "def f():\n\tif é:\n\t\treturn '→' + (\n\t\t\té)\n",
    "suites": "class A: x = 1; y = 2\nwhile a: b; c\nelse: d\ntry: e\nexcept E as n: f\n",
    "nested": "@a.b(c)\n@d\nclass C(B, metaclass=M):\n    def m(self, *a, k=1, **kw) -> int:\n"
    "        return [i for i in a if i] or {k: v for k, v in kw.items()}\n",
}


def _sources() -> list[tuple[str, str]]:
    """The layouts, then every apex fixture."""
    files = sorted((FIXTURES / "apex").rglob("*.py"))
    return [*LAYOUTS.items(), *((str(p.relative_to(FIXTURES)), p.read_text()) for p in files)]


SOURCES = _sources()


class _Visited(cst.CSTVisitor):
    """Every node in the order a visit reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.nodes.append(node)
        return True


@pytest.mark.parametrize(("name", "text"), SOURCES, ids=[n for n, _ in SOURCES])
def test_walk_is_the_parent_map_and_the_visit_order(name: str, text: str) -> None:
    module = cst.parse_module(text)
    walk = Walk(module)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ParentNodeProvider)
    assert dict(walk) == dict(expected)
    visited = _Visited()
    module.visit(visited)
    assert walk.nodes == visited.nodes
    assert len({id(n) for n in walk.nodes}) == len(walk.nodes)  # no node twice in the tree
    # each subtree is the slice up to its end: the node, then its children's subtrees in turn
    for at, node in enumerate(walk.nodes):
        end = at + 1
        for child in node.children:
            assert walk.nodes[end] is child
            end = walk.ends[id(child)]
        assert walk.ends[id(node)] == end


@pytest.mark.parametrize(("name", "text"), SOURCES, ids=[n for n, _ in SOURCES])
def test_positions_are_position_providers(name: str, text: str) -> None:
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    found = positions(module)
    assert found.keys() == expected.keys()
    for node, where in expected.items():
        spans = (where.start.line, where.start.column, where.end.line, where.end.column)
        assert found[node] == spans, (name, cst.Module([]).code_for_node(node))


@pytest.mark.parametrize(("name", "text"), SOURCES, ids=[n for n, _ in SOURCES])
def test_scopes_are_scope_providers(name: str, text: str) -> None:
    module = cst.parse_module(text)
    if _late_globals(module):
        pytest.skip("a late `global`: resolved as CPython does, not as libcst (tested below)")
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
    found = scopes(module)
    assert found.keys() == expected.keys()
    for node, scope in expected.items():
        assert type(found[node]) is type(scope)
        assert qualified_names(found[node], node) == qualified_names(scope, node)
        if scope is not None:
            names = sorted(a.name for a in scope.assignments)
            assert sorted(a.name for a in found[node].assignments) == names


def test_a_global_declared_after_its_import_binds_the_module_name_as_cpython_does() -> None:
    """``from apex import amp`` then ``global amp`` in one function: CPython binds the
    module's ``amp`` (the other function's ``amp.scale_loss`` is apex's); libcst's own scopes
    take a local there. Everything else resolves as libcst's do."""
    text = (
        "def setup():\n    from apex import amp\n    global amp\n\n\n"
        "def update(loss):\n    amp.scale_loss(loss)\n    other.call()\n"
    )
    exec(compile(text.replace("from apex import amp", "from os import path as amp"), "t", "exec"))
    module = cst.parse_module(text)
    found = scopes(module)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
    calls = {cst.Module([]).code_for_node(n.func): n for n in found if isinstance(n, cst.Call)}
    scale = calls["amp.scale_loss"]
    assert qualified_names(found[scale], scale.func) == {"apex.amp.scale_loss"}
    assert qualified_names(expected[scale], scale.func) == set()  # libcst's own reading
    other = calls["other.call"]
    assert qualified_names(found[other], other.func) == qualified_names(expected[other], other.func)
