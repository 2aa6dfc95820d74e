"""The engine's own pieces: positions, fix selection, the import fast path, batching, tiers."""

from __future__ import annotations

import ast
import subprocess
import sys

import libcst as cst
import pytest

from ampmigrate.engine import batches
from ampmigrate.engine.apply import apply, libcst_imports, select
from ampmigrate.engine.imports import add_needed, remove_unused
from ampmigrate.engine.prefilter import Prefilter
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Fix, ImportEdit


def test_source_turns_ast_byte_columns_into_characters():
    data = '# -*- coding: latin-1 -*-\ns = "é"; x = 1\r\nif x:\n\ty = s\n'.encode("latin-1")
    source = Source.from_bytes(data)
    names = [n for n in ast.walk(ast.parse(data)) if isinstance(n, ast.Name)]
    assert [source.segment(n) for n in names] == ["s", "x", "x", "y", "s"]
    assert source.position(names[1]) == (2, 10, 2, 11)  # 1-based characters, not bytes
    assert source.line_indent(4) == "\t"
    bom = "\ufeffx = 1\n".encode()
    assert Source.from_bytes(bom).text == "x = 1\n" and Source.from_bytes(bom).encode() == bom


def test_overlapping_fixes_wait_for_the_next_pass():
    text = "abcdef"
    outer = Fix("safe", edits=(Edit(0, 6, "XYZ"),))
    inner = Fix("safe", edits=(Edit(2, 3, "C"),))
    apart = Fix("safe", edits=(Edit(6, 6, "!"),))
    chosen = select([outer, inner, apart])
    assert chosen == [outer, apart]
    assert apply(text, chosen) == "XYZ!"


AMP = ImportEdit("torch.cuda.amp", "autocast")
SCALER = ImportEdit("torch.cuda.amp", "GradScaler")
CASES = {
    "whole statement, comment above": (
        "import torch\n# amp\nfrom torch.cuda.amp import autocast  # x\n\ny = 1\n",
        [AMP],
        [],
    ),
    # comment lines above a removed import stay (Ruff's F401 fix); blank lines go as before
    "comment above, in a function": (
        "import os\n\n\ndef f():\n    x = 1\n\n    # keep me\n"
        "    from torch.cuda.amp import autocast\n    return x\n",
        [AMP],
        [],
    ),
    "one of two names": (
        "import torch\nfrom torch.cuda.amp import autocast, GradScaler\n\ns = GradScaler()\n",
        [AMP, SCALER],
        [],
    ),
    "still used": ("import os\nfrom torch.cuda.amp import autocast\nautocast()\n", [AMP], []),
    "add after the block": ("import os\nx = 1\n", [], ["torch", "torch.amp:GradScaler"]),
    "add before a comment": ("import os\n# c\nx = 1\n", [], ["torch"]),
    "add before a blank line": ("'''doc'''\nimport os\n\nx = 1\n", [], ["torch"]),
    "already there": ("import torch\nx = 1\n", [], ["torch"]),
    "remove, then add": (
        "import os\nfrom torch.cuda.amp import autocast\nx = 1\n",
        [AMP],
        ["torch"],
    ),
    "crlf": ("import os\r\nfrom torch.cuda.amp import autocast\r\nx = 1\r\n", [AMP], ["torch"]),
    # shapes left to libcst: the fast path must say so, never guess
    "first statement": ("from torch.cuda.amp import autocast\nx = 1\n", [AMP], ["torch"]),
    "named in __all__": (
        "import os\nfrom torch.cuda.amp import autocast\n__all__ = ['autocast']\n",
        [AMP],
        [],
    ),
    "in a function": (
        "import os\ndef f():\n    from torch.cuda.amp import autocast\n    return 1\n",
        [AMP],
        [],
    ),
    "extends a from-import": ("from torch.amp import autocast\nx = 1\n", [], ["torch.amp:foo"]),
    "parenthesized": (
        "import os\nfrom torch.cuda.amp import (\n    autocast,\n    GradScaler,\n)\n"
        "s = GradScaler\n",
        [AMP],
        [],
    ),
    "import guard": (
        "import os\n\n# probe\ntry:\n    from torch.cuda.amp import autocast\nexcept ImportError:\n"
        "    raise\n\n\ndef f():\n    pass\n",
        [AMP],
        [],
    ),
    # a mention in a comment sends it to libcst, which must not leave `try: pass` (SimVODIS)
    "import guard, name in a comment": (
        "import os\n\ntry:\n    from torch.cuda.amp import autocast\nexcept ImportError:\n"
        "    raise\n# autocast here\nx = 1\n",
        [AMP],
        [],
    ),
    # an `if` left with nothing but `pass` goes when its test calls nothing (its if/else stays)
    "import under an if": (
        "import os\n\nif os.sep:\n    from torch.cuda.amp import autocast\nx = 1\n",
        [AMP],
        [],
    ),
    "import under an if whose test calls": (
        "import os\n\nif os.getenv('A'):\n    from torch.cuda.amp import autocast\nx = 1\n",
        [AMP],
        [],
    ),
}


def test_a_star_import_after_a_removed_one_keeps_the_comments_where_they_were():
    """physicsnemo's domino train.py (the 48th review): removing `from torch.cuda.amp import
    ...` before `from m import *` copied the comment blocks of the later imports above the
    star import (a star import names nothing, so it was taken for a removed statement and
    every later one was matched against the wrong statement): each block came out twice."""
    text = (
        "import os\nfrom torch.cuda.amp import autocast, GradScaler\nfrom m import *\n\n"
        "# tracking\nfrom p import q\n\n# profiler\n\n\nfrom r import s\n\nx = 1\n"
    )
    kept = libcst_imports(cst.parse_module(text), [AMP, SCALER], [])
    assert kept == text.replace("from torch.cuda.amp import autocast, GradScaler\n", "")
    fast = remove_unused(text, [AMP, SCALER])
    assert fast is None or fast == kept


FAST = {"whole statement, comment above", "one of two names", "still used", "add after the block"}
FAST |= {"add before a comment", "add before a blank line", "already there", "remove, then add"}
FAST |= {"crlf", "import guard"}


@pytest.mark.parametrize("case", CASES)
def test_import_fast_path_is_libcst_or_declines(case):
    text, removals, additions = CASES[case]
    fast = remove_unused(text, removals)
    fast = add_needed(fast, additions) if fast is not None else None
    if case in FAST:
        assert fast is not None, "a common shape went to libcst"
    if fast is not None:
        assert fast == libcst_imports(cst.parse_module(text), removals, additions)
    if case.startswith("import guard"):  # nothing left to guard: the try goes
        assert "try" not in libcst_imports(cst.parse_module(text), removals, additions)
    kept = libcst_imports(cst.parse_module(text), removals, additions)
    if "# amp\n" in text or "# keep me\n" in text:
        assert "# amp\n" in kept or "# keep me\n" in kept, kept
        assert "from torch.cuda.amp" not in kept
    if case == "import under an if":
        assert libcst_imports(cst.parse_module(text), removals, additions) == "import os\n\nx = 1\n"
    if case == "import under an if whose test calls":  # (the call stays, as `pass` in it)
        assert "    pass\n" in libcst_imports(cst.parse_module(text), removals, additions)


def test_batches_put_big_files_first_and_alone():
    items = [(f"f{i}", b"x" * size, frozenset()) for i, size in enumerate([10, 5000, 20, 30] * 5)]
    work = batches(items, 2)
    assert [len(b[1]) for b in work[0]] == [5000]
    assert sum(len(b) for b in work) == len(items) and len(work) > 2
    sizes = [len(item[1]) for batch in work for item in batch]
    assert sizes == sorted(sizes, reverse=True)


def test_prefilter_anchors_are_few_and_stand_for_every_trigger():
    from ampmigrate.catalog import all_rules

    triggers = [t for r in all_rules().values() for t in r.triggers]
    prefilter = Prefilter(triggers)
    assert len(prefilter.anchors) <= 20
    for trigger in triggers:
        if trigger.startswith(("/", "@")):
            continue
        spelled = " ".join(trigger.split("."))
        assert Prefilter([trigger]).may_match(spelled.encode()), trigger
        assert any(a in spelled.encode() for a in prefilter.anchors), trigger
    assert not prefilter.may_match(b"import torch\nscale = 2\nmodel.half()\n")


def _modules_after_check(tmp_path, text: str) -> set[str]:
    path = tmp_path / "m.py"
    path.write_text(text)
    code = (
        "import sys; from ampmigrate.cli import main\n"
        f"try: main(['check', '--jobs', '1', {str(path)!r}])\n"
        "except SystemExit: pass\n"
        "print('LOADED', *(m for m in sys.modules if m.split('.')[0] == 'libcst'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "AMP" in out.stdout, "the file was not checked"
    return set(out.stdout.rpartition("LOADED")[2].split())


def test_check_imports_no_libcst_unless_apex_amp_is_used(tmp_path):
    torch_amp = "import torch\nfrom torch.cuda.amp import GradScaler, autocast\ns = GradScaler()\n"
    torch_amp += "scaler.scale(loss).backward()\nimport tensorflow as tf\n"
    torch_amp += "tf.keras.mixed_precision.experimental.set_policy('mixed_float16')\n"
    assert _modules_after_check(tmp_path, torch_amp) == set()
    apex = "from apex import amp\nmodel, opt = amp.initialize(model, opt, opt_level='O1')\n"
    assert "libcst" in _modules_after_check(tmp_path, apex)


def test_a_fix_folded_into_an_enclosing_fix_counts_as_fixed():
    from conftest import fix_source

    source = (
        "import tensorflow as tf\n\n"
        "opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(\n"
        "    tf.keras.optimizers.SGD(),\n"
        "    loss_scale=tf.mixed_precision.experimental.DynamicLossScale(),\n"
        ")\n"
    )
    out, remaining, fixed = fix_source(source, unsafe=True)
    assert "DynamicLossScale" not in out and not remaining
    assert sorted(d.code for d in fixed) == ["AMP401", "AMP403"]  # the libcst engine's count


def test_a_big_tree_is_read_and_prefiltered_in_the_workers_with_the_same_results(
    tmp_path, monkeypatch
):
    """Above PARALLEL_MIN_FILES files the workers read and prefilter slices of the tree (then
    analyse the files that pass); the results (order, findings, errors, which files keep their
    bytes) are those of one process."""
    import ampmigrate.engine as engine
    from ampmigrate.catalog import all_rules

    paths = []
    for i in range(24):
        path = tmp_path / f"m{i:02}.py"
        uses = i % 5 == 0
        path.write_text(
            "import torch\nwith torch.cuda.amp.autocast():\n    pass\n" if uses else "x = 1\n"
        )
        paths.append(path)
    paths.insert(7, tmp_path / "missing.py")
    settings = engine.Settings(rules=tuple(all_rules().values()))
    serial = engine.run(paths, settings, jobs=1)
    monkeypatch.setattr(engine, "PARALLEL_MIN_FILES", 4)
    monkeypatch.setattr(engine, "PARALLEL_MIN_BYTES", 1)  # the same pool analyses them too
    sliced, real = [], engine._scan_in
    monkeypatch.setattr(engine, "_scan_in", lambda *args: sliced.append(args[1]) or real(*args))
    parallel = engine.run(paths, settings, jobs=2)
    assert sliced == [[str(p) for p in paths]]  # the workers read the tree

    def summary(results):
        return [
            (r.path, [(d.code, d.line) for d in r.diagnostics], r.error, r.original is not None)
            for r in results
        ]

    assert summary(parallel) == summary(serial)
    assert sum(bool(r.diagnostics) for r in serial) == 5
    assert serial[7].error and serial[0].original is not None and serial[1].original is None


def test_sibling_modules_travel_by_name_and_are_summarized_when_asked(tmp_path):
    """AMP208's sibling modules are named before the run and summarized (parsed) only when a
    call leads into one, in the process that asks; pickled for a worker without summaries."""
    import pickle

    from ampmigrate.scalerflow import sibling_modules

    utils = tmp_path / "utils.py"
    utils.write_text(
        "import torch\n\n\ndef save_checkpoint(model, optimizer, path):\n"
        '    torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()}, path)\n'
    )
    train = tmp_path / "train.py"
    train.write_text(
        "import torch\nfrom utils import save_checkpoint\n\nscaler = torch.amp.GradScaler()\n"
    )
    siblings = sibling_modules([(str(train), train.read_bytes())], [str(train), str(utils)])
    assert siblings.wanted == {str(utils)}
    for copy in (siblings, pickle.loads(pickle.dumps(siblings))):
        assert copy.wanted == siblings.wanted and not copy._summaries
        assert copy.helpers(str(utils))["save_checkpoint"].save_line == 5
        assert copy.helpers(str(train)) == {}  # not a sibling module: never read
        assert list(copy._summaries) == [str(utils)]
    assert pickle.loads(pickle.dumps(siblings))._summaries == {}  # summaries stay where made
    empty = pickle.loads(pickle.dumps(sibling_modules([], [str(train)])))
    assert not empty and empty.helpers(str(utils)) == {}


def test_a_module_imported_below_the_top_block_is_not_imported_again():
    """`import sys; sys.path.insert(...); import torch`: libcst's import manager looks at the top
    block only and would add a second `import torch` above `sys.path.insert`."""
    late = "import sys\nsys.path.insert(0, '.')\nimport torch\n\nx = torch.ones(1)\n"
    assert add_needed(late, ["torch"]) == late
    module = cst.parse_module(late)
    fix = Fix("unsafe", cst_target=module, cst_build=lambda u: u, cst_module=module,
              add_imports=frozenset({"torch"}))  # fmt: skip
    assert apply(late, [fix]) == late
    read_first = "import sys\nsys.path.insert(0, torch.__file__)\nimport torch\n"
    assert add_needed(read_first, ["torch"]).startswith("import sys\nimport torch\n")


@pytest.mark.parametrize(
    ("top", "added"),
    [
        ("import torch.nn\n", False),  # binds `torch` (the 57th review: it was imported again)
        ("import torch.nn as nn\n", True),  # binds `nn` only
        ("import torch.cuda.amp\nfrom apex import amp\n", False),
    ],
)
def test_a_package_a_submodule_import_binds_is_not_imported_again(top, added):
    text = top + "\nx = torch.amp.GradScaler('cuda')\n"
    fix = Fix("unsafe", add_imports=frozenset({"torch"}))
    assert apply(text, [fix]).startswith(top + "import torch\n") is added


def test_a_migrated_file_leaves_no_syntax_tree_to_the_cycle_collector():
    """Once a file is done its trees are freed by reference counting: name resolution's scope
    <-> binding cycles, left for the collector, kept every tree of a run alive until a
    collection walked it (most of the collector's time in a run)."""
    import gc

    from ampmigrate.catalog import all_rules
    from ampmigrate.engine.migrate import migrate_source
    from ampmigrate.engine.settings import Settings

    source = b"import torch\n\ndef f(x):\n    with torch.cuda.amp.autocast():\n        return x\n"
    settings = Settings(rules=tuple(all_rules().values()), fix=True)

    def trees() -> int:
        return sum(isinstance(o, ast.Module) for o in gc.get_objects())

    migrate_source(source, settings, "train.py")  # families imported, caches filled
    gc.collect()
    gc.disable()
    try:
        before = trees()
        new, _, fixed = migrate_source(source, settings, "train.py")
        assert fixed and b"torch.amp.autocast" in new  # analysed, fixed and analysed again
        assert trees() == before
    finally:
        gc.enable()


def test_a_removed_statement_keeps_the_comments_a_blank_line_sets_apart():
    """What a fix removes takes the comment right above it along, not commented-out code or a
    note that a blank line separates from it: those go to the statement that now follows, or
    to the block's end (a removal at the end of a block, and at the end of the module)."""
    import libcst as cst

    from ampmigrate.replace import ReplaceNodes

    source = (
        "def f():\n"
        "    a = 1\n"
        "    # old code\n"
        "    # b = 2\n"
        "\n"
        "    # about c\n"
        "    c = 3\n"
        "    d = 4\n"
        "    # kept at the end\n"
        "\n"
        "    e = 5\n"
        "x = 1\n"
    )
    module = cst.parse_module(source)
    body = module.body[0].body.body
    gone = {body[1]: lambda _u: cst.RemoveFromParent(), body[3]: lambda _u: cst.RemoveFromParent()}
    out = module.visit(ReplaceNodes(gone)).code
    assert out == (
        "def f():\n"
        "    a = 1\n"
        "    # old code\n"
        "    # b = 2\n"
        "\n"
        "    d = 4\n"
        "    # kept at the end\n"
        "\n"
        "x = 1\n"
    )


def test_a_block_whose_first_statement_goes_starts_at_the_next_one():
    """`from apex import amp` first in a function, then a blank line: once it goes, the body
    starts at the next statement, not at a blank line; a comment there stays, and a block
    whose first statement stays is left as it was."""
    from ampmigrate.replace import ReplaceNodes

    source = "def f():\n    import a\n\n    # kept\n    x = 1\n\n    y = 2\n"
    module = cst.parse_module(source)
    first = module.body[0].body.body[0]
    out = module.visit(ReplaceNodes({first: lambda _u: cst.RemoveFromParent()}))
    assert out.code == "def f():\n    # kept\n    x = 1\n\n    y = 2\n"
    plain = cst.parse_module("def f():\n    import a\n\n    x = 1\n")
    gone = plain.body[0].body.body[0]
    assert plain.visit(ReplaceNodes({gone: lambda _u: cst.RemoveFromParent()})).code == (
        "def f():\n    x = 1\n"
    )
    second = plain.body[0].body.body[1]
    kept = plain.visit(ReplaceNodes({second: lambda _u: cst.parse_statement("y = 2\n")}))
    assert kept.code == "def f():\n    import a\n    y = 2\n"


def test_a_fix_whose_output_does_not_compile_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """The 66th review: a rewrite gave a function two `scaler` parameters, which `ast` parses
    and only the compiler refuses ("duplicate argument"); the file was written, and `check`
    on it passed. Whatever a fix produces must compile: otherwise the file is left untouched
    and reported as an error, as for output that does not parse."""
    from ampmigrate.engine import migrate

    def duplicated(text, chosen, keep_imports):
        return apply(text, chosen, keep_imports).replace("def step(x)", "def step(x, x)")

    monkeypatch.setattr(migrate, "apply", duplicated)
    path = tmp_path / "train.py"
    original = (
        "import torch\n\n\ndef step(x):\n    with torch.cuda.amp.autocast():\n        return x\n"
    )
    path.write_text(original)
    result = migrate.process(str(path), None, _fix_settings())
    assert result.error is not None and "does not compile" in result.error
    assert "duplicate argument 'x'" in result.error
    assert result.new_source is None  # (nothing for the writer)
    monkeypatch.undo()
    assert (
        "torch.amp.autocast"
        in migrate.process(str(path), None, _fix_settings()).new_source.decode()
    )


def _fix_settings():
    from ampmigrate.catalog import all_rules
    from ampmigrate.engine.settings import Settings

    return Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)


def test_a_name_mentioned_only_in_comments_or_plain_strings_is_unused():
    """The 75th review (Astroformer's `benchmark.py`): `from apex import amp` nothing reads, in
    a `try` that also sets a flag, beside `parser.add_argument("--amp", ...)`: the mention in
    the string sent the removal to libcst, which left `try: has_apex = True except
    ImportError: pass`. A comment or a plain string is no use; an annotation, `__all__` or a
    `typing.cast` string still is (libcst's reading), and then the fast path declines."""
    edit = ImportEdit("apex", "amp")
    text = (
        "import argparse\n\nhas_apex = False\ntry:\n    from apex import amp\n"
        "    has_apex = True\nexcept ImportError:\n    pass\n\n# the --amp flag\n"
        'parser = argparse.ArgumentParser()\nparser.add_argument("--amp", action="store_true")\n'
    )
    out = remove_unused(text, [edit])
    assert out == text.replace(
        "try:\n    from apex import amp\n    has_apex = True\nexcept ImportError:\n    pass\n",
        "has_apex = True\n",
    ), out
    for code in ('x: "amp.Scaler" = None\n', '__all__ = ["amp"]\n', 'y = cast("amp", z)\n'):
        assert remove_unused(text + code, [edit]) is None, code


def test_a_message_is_one_line_at_every_boundary_splitlines_knows():
    """The 83rd review: a form feed or U+2028 inside a quoted expression still split the
    message for `str.splitlines` (the text format's one finding per line)."""
    from ampmigrate.engine.analyze import _ONE_LINE

    text = "a\fb\u2028c\x85d\r\ne\n  f"
    assert _ONE_LINE.sub(" ", text).splitlines() == ["a b c d e f"]
