"""Apply fix plans to a file's text: the text edits, then the imports, in memory.

Text edits come from ``ast`` positions and are applied to the decoded text; a fix whose edits
overlap one already taken waits for the next pass (the caller re-analyses and comes back).
Imports are added and dropped by ``imports`` where it can do exactly what libcst's codemod
visitors do (the common cases); libcst runs only for the other cases (they know where an import
goes and whether a name is still used) and for the apex planner's node replacements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ampmigrate.engine import imports
from ampmigrate.findings import Edit, Fix, ImportEdit


class FixError(Exception):
    """A fix produced code that does not parse: a bug in a rule, never written to disk."""


def _overlaps(edit: Edit, taken: list[Edit]) -> bool:
    return any(
        edit.start == other.start or (edit.start < other.end and other.start < edit.end)
        for other in taken
    )


def select(fixes: Sequence[Fix]) -> list[Fix]:
    """The fixes one pass applies: text fixes in order while they do not overlap an earlier
    one; the libcst ones (apex) only in a pass without text edits, as their tree is the text
    before any edit."""
    taken: list[Edit] = []
    chosen: list[Fix] = []
    for fix in fixes:
        if fix.cst_target is not None:
            continue
        if any(_overlaps(edit, taken) for edit in fix.edits):
            continue
        taken += fix.edits
        chosen.append(fix)
    if not taken:
        chosen += [fix for fix in fixes if fix.cst_target is not None]
    return chosen


def apply(text: str, fixes: Sequence[Fix], keep_imports: bool = False) -> str:
    """``text`` with ``fixes`` (as chosen by :func:`select`) applied.

    Fixes with a ``cst_target`` carry the libcst tree of ``text`` it belongs to.
    ``keep_imports`` is for a package's ``__init__.py``, whose imports are its public API: other
    modules may import the name from it, so it stays even when unused here.
    """
    edits = sorted((e for fix in fixes for e in fix.edits), key=lambda e: (e.start, e.end))
    parts = []
    end = len(text)
    for edit in reversed(edits):
        parts.append(text[edit.end : end])
        parts.append(edit.text)
        end = edit.start
    parts.append(text[:end])
    text = "".join(reversed(parts))

    builds = {fix.cst_target: fix.cst_build for fix in fixes if fix.cst_target is not None}
    removals = set() if keep_imports else {e for fix in fixes for e in fix.remove_imports}
    additions = {name for fix in fixes for name in fix.add_imports}
    if not builds and not removals and not additions:
        return text
    module = None
    if builds:
        # (libcst is imported already: the apex planner's tree is one)
        from ampmigrate.replace import ReplaceNodes

        tree = next(fix.cst_module for fix in fixes if fix.cst_target is not None)
        module = tree.visit(ReplaceNodes(builds))
        text = module.code
        additions -= imports.imported_below_the_top(text)
        # (a module the rewritten file never reads is not needed: the apex helper whose
        # callers cast keeps only `scaler.scale(loss)`)
        additions = {a for a in additions if ":" in a or imports.reads(text, a.split(".")[0])}
    fast = imports.remove_unused(text, sorted(removals, key=repr))
    if fast is not None and additions:  # (what is left bound once the removals are made)
        additions -= imports.bound_by_submodule_imports(fast)
    fast = imports.add_needed(fast, additions) if fast is not None else None
    if fast is not None:
        return fast
    # libcst (and its codemod package, ~0.5 s to import) only for runs that need it.
    import libcst as cst

    if module is None:
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            raise FixError(f"produced code that does not parse ({exc})") from exc
    return libcst_imports(module, sorted(removals, key=repr), sorted(additions))


def libcst_imports(module: Any, removals: Sequence[ImportEdit], additions: Sequence[str]) -> str:
    """libcst's codemod import manager on ``module``: the reference the text fast path equals."""
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

    context = CodemodContext()
    for edit in removals:
        RemoveImportsVisitor.remove_unused_import(context, edit.module, edit.obj, edit.asname)
    for name in additions:
        module_name, _, obj = name.partition(":")  # "a.b:c" is `from a.b import c`
        AddImportsVisitor.add_needed_import(context, module_name, obj or None)
    if removals:
        before = module
        module = RemoveImportsVisitor(context).transform_module(module)
        module = keep_comments(before, module)
        module = _drop_emptied_guards(before, module)
    if additions:
        module = AddImportsVisitor(context).transform_module(module)
    return module.code


def keep_comments(before: Any, after: Any) -> Any:
    """libcst drops an import statement with the lines above it, comments too (a commented-out
    alternative kept above a function-local ``import apex``); as Ruff's F401 fix does, only
    the statement goes: comment lines above a removed import stay, before the next statement
    of its block (its footer where none follows)."""
    import libcst as cst

    def blocks(module: Any) -> list:
        found: list = [module]

        class Collect(cst.CSTVisitor):
            def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
                found.append(node)

        module.visit(Collect())
        return found

    def imported(statement: Any) -> set[str] | None:
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body
        ):
            names = cst.Module([]).code_for_node
            out: set[str] = set()
            for s in statement.body:  # (`from m import *` names "*": it is no removed import)
                out |= {names(a) for a in s.names} if isinstance(s.names, Sequence) else {"*"}
            return out
        return None

    old, new = blocks(before), blocks(after)
    if len(old) != len(new):
        return after
    carried: dict[int, list] = {}  # by id of the new block: the comments each statement gets
    for o, n in zip(old, new, strict=True):
        j, pending, moves = 0, [], {}
        for statement in o.body:
            names = imported(statement)
            following = n.body[j] if j < len(n.body) else None
            mine = imported(following) if following is not None else None
            if names is None or (mine and mine <= names):
                if pending:
                    moves[j] = pending
                    pending = []
                j += 1
                continue
            if any(line.comment is not None for line in statement.leading_lines):
                pending = [*pending, *statement.leading_lines]
        if pending:
            moves[len(n.body)] = pending
        if moves:
            carried[id(n)] = moves
    if not carried:
        return after

    def moved(updated: Any, moves: dict) -> Any:
        body = [
            s.with_changes(leading_lines=[*moves[i], *s.leading_lines]) if i in moves else s
            for i, s in enumerate(updated.body)
        ]
        tail = moves.get(len(updated.body), [])
        return updated.with_changes(body=body, footer=[*tail, *updated.footer])

    class Move(cst.CSTTransformer):
        def leave_IndentedBlock(self, original: Any, updated: Any) -> Any:
            moves = carried.get(id(original))
            return moved(updated, moves) if moves else updated

        def leave_Module(self, original: Any, updated: Any) -> Any:
            moves = carried.get(id(original))
            return moved(updated, moves) if moves else updated

    return after.visit(Move())


def _drop_emptied_guards(before: Any, after: Any) -> Any:
    """A ``try:`` of imports only whose imports all went is left as ``try: pass`` by libcst:
    nothing is left to guard and its handlers can no longer run, so it goes, as on the text
    fast path (its leading comments move to the next statement). So does an ``if`` without
    ``else`` around imports only, whose test calls nothing (``if args.amp: from apex import
    amp, optimizers``): ``if args.amp: pass`` does nothing."""
    import libcst as cst

    def tries(module: Any) -> list:
        found: list = []

        class Collect(cst.CSTVisitor):
            def visit_Try(self, node: cst.Try) -> None:
                found.append(node)

            def visit_If(self, node: cst.If) -> None:
                found.append(node)

        module.visit(Collect())
        return found

    def pure(test: Any) -> bool:
        found: list = []

        class Effects(cst.CSTVisitor):
            def on_visit(self, node: Any) -> bool:
                if isinstance(node, cst.Call | cst.Await | cst.NamedExpr | cst.Yield):
                    found.append(node)
                return not found

        test.visit(Effects())
        return not found

    old, new = tries(before), tries(after)
    if len(old) != len(new):
        return after
    emptied = {
        id(n)
        for o, n in zip(old, new, strict=True)
        if o.orelse is None
        and (pure(o.test) if isinstance(o, cst.If) else o.finalbody is None)
        and all(
            isinstance(s, cst.SimpleStatementLine)
            and all(isinstance(i, cst.Import | cst.ImportFrom) for i in s.body)
            for s in o.body.body
        )
        and all(  # (libcst leaves an empty block, which it writes as `pass`)
            isinstance(s, cst.SimpleStatementLine) and all(isinstance(i, cst.Pass) for i in s.body)
            for s in n.body.body
        )
    }
    if not emptied:
        return after

    def kept(original: Any, updated: Any) -> Any:
        """The block without its emptied guards; their comments go to the next statement, or
        to the block's footer where none follows (as ``keep_comments`` places them)."""
        out: list = []
        carried: Sequence[Any] = ()
        for before_edit, statement in zip(original.body, updated.body, strict=True):
            if id(before_edit) in emptied:
                carried = [*carried, *statement.leading_lines]
                continue
            if carried:
                statement = statement.with_changes(
                    leading_lines=[*carried, *statement.leading_lines]
                )
                carried = ()
            out.append(statement)
        return updated.with_changes(
            body=out or [cst.SimpleStatementLine(body=[cst.Pass()])],
            footer=[*(line for line in carried if line.comment is not None), *updated.footer],
        )

    class Drop(cst.CSTTransformer):
        def leave_IndentedBlock(self, original: Any, updated: Any) -> Any:
            if not any(id(s) in emptied for s in original.body):
                return updated
            return kept(original, updated)

        def leave_Module(self, original: Any, updated: Any) -> Any:
            if not any(id(s) in emptied for s in original.body):
                return updated
            return kept(original, updated)

    return after.visit(Drop())
