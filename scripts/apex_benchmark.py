"""Success rate of the apex O1 rewrite (AMP303) on the training scripts of real public projects.

    python scripts/apex_benchmark.py CORPUS_DIR [--split tuned|dev|heldout|all] [--markdown]
                                     [--json FILE] [--manifest FILE] [--show-heldout]
                                     [--apex-opt-level O1]
    python scripts/apex_benchmark.py CORPUS_DIR --build-from GIT_ROOT

The corpus is not committed (third-party code) and CI has no network: bring the repositories
named in scripts/apex-corpus.json (repository, commit, subtrees, benchmarked files) with the
library search tool's ``fetch`` or ``git clone``, then ``--build-from GIT_ROOT`` extracts the
``.py`` files of each entry's subtrees at its commit into CORPUS_DIR/<owner>+<name>/. GIT_ROOT
holds one git directory per repository: ``<owner>+<name>/repo`` (what ``fetch`` brings),
``<owner>+<name>`` or ``<name>`` (a clone).

The run copies the corpus to a scratch directory, runs the installed ampmigrate
(``python -m ampmigrate fix --unsafe-fixes --select AMP30``) on the whole copy, so that helpers in
sibling modules are updated as ``fix`` on a project would, and classifies each benchmarked file
(only the apex amp rules run: a file that the rules for the rest of apex, AMP31x, change while
its amp use stays would otherwise count as a wrong amp rewrite):

- eligible: its only apex use is O1 ``initialize`` / ``scale_loss`` / ``master_params`` / amp
  state dicts (opt_level "O1", a variable or absent); any other apex module (parallel,
  optimizers, fp16_utils), O0/O2/O3, property overrides or multiple loss ids make it ineligible;
- outcome: ``rewritten`` (no apex amp left), ``refused`` (the AMP303 blocker, shortened) or
  ``wrong``: the output does not compile, ``check`` reports a code the original did not have,
  the region invariant breaks (``region_violations``), or a parameter the rewrite added to a
  function is not passed by one of its callers in the project (``missed_callers``).

Other files that ``fix`` changed are checked the same way and listed when wrong. Exit status 1
when a rewrite is wrong.

Each entry has a ``split`` (scripts/apex_split.py): ``tuned`` (the repositories earlier sessions
tuned on), ``dev`` or ``heldout``; the report gives each split on its own. The new entries carry
a hand ``judgement`` per file (would a careful engineer migrate it to torch.amp with apex's
semantics?); the headline per split is how many of the files judged migratable are rewritten,
how many rewrites are wrong, and how many files judged not migratable are rewritten anyway.
Files without a judgement (the tuned entries) fall back to the automatic eligibility. The
held-out half's per-file rows are left out of the table and the JSON unless ``--show-heldout``
is given: who builds the rewrite sees only its aggregates.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "scripts" / "apex-corpus.json"
ALLOWED_AMP = {"initialize", "scale_loss", "master_params", "state_dict", "load_state_dict"}
ALLOWED_INIT_KEYWORDS = {"opt_level", "enabled", "verbosity"}
REFUSAL_PREFIX = "apex O1 cannot be rewritten automatically here"
SPLITS = ("tuned", "dev", "heldout")

# ---------------------------------------------------------------------------------------------
# The region invariant, on stdlib ast only (independent of ampmigrate's libcst code).

Function = ast.FunctionDef | ast.AsyncFunctionDef


def dotted(node: ast.AST) -> str | None:
    """`self.model` for an Attribute chain over a Name, `model` for a Name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _is_autocast(item: ast.withitem) -> bool:
    """A `with ...autocast(...)` item that enables autocast (not `enabled=False`)."""
    call = item.context_expr
    if not isinstance(call, ast.Call):
        return False
    name = dotted(call.func) or ""
    if name.rsplit(".", 1)[-1] != "autocast":
        return False
    return not any(
        k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in call.keywords
    )


def _calls(node: ast.AST, inside: bool = False):
    """Yield (call, inside_autocast) for the calls under one function, not entering nested
    functions, classes or lambdas (they are judged on their own)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(child, ast.With | ast.AsyncWith):
            region = inside or any(map(_is_autocast, child.items))
            for item in child.items:
                yield from _calls(item, inside)
            for stmt in child.body:
                yield from _calls(ast.Module(body=[stmt], type_ignores=[]), region)
            continue
        if isinstance(child, ast.Call):
            yield child, inside
        yield from _calls(child, inside)


def _functions(tree: ast.AST) -> dict[str, tuple[Function, str | None]]:
    """Every function by qualified name (`Trainer.train_step`, `main.update`), with its class;
    the module's own code as `<module>`."""
    found: dict[str, tuple[Function, str | None]] = {}

    def visit(node: ast.AST, prefix: str, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", child.name)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found[f"{prefix}{child.name}"] = (child, cls)
                visit(child, f"{prefix}{child.name}.", None)
            else:
                visit(child, prefix, cls)

    visit(tree, "", None)
    found["<module>"] = (tree, None)  # a script that trains at module level (pix2pixHD)
    return found


def _scale_receivers(func: Function) -> list[ast.expr]:
    """The losses this function back-propagates through a scaler: `X` in
    `<scaler>.scale(X).backward()` / `s = <scaler>.scale(X); s.backward()`, or
    `with amp.scale_loss(X, ...)` (an unrewritten apex function)."""
    scaled_names: dict[str, ast.expr] = {}
    losses: list[ast.expr] = []
    for node, _ in _calls(func):
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "scale"
            and node.args
            and "scaler" in (dotted(node.func.value) or "").lower()
        ):
            losses.append(node.args[0])
        if isinstance(node.func, ast.Attribute) and node.func.attr == "scale_loss" and node.args:
            losses.append(node.args[0])
    for stmt in ast.walk(func):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            callee = stmt.value.func
            if isinstance(callee, ast.Attribute) and callee.attr == "scale" and stmt.value.args:
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        scaled_names[target.id] = stmt.value.args[0]
    for node, _ in _calls(func):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "backward":
            receiver = f.value
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
                if receiver.func.attr == "scale" and receiver.args:
                    losses.append(receiver.args[0])
            elif isinstance(receiver, ast.Name) and receiver.id in scaled_names:
                losses.append(scaled_names[receiver.id])
    return losses


def _names(node: ast.AST) -> set[str]:
    """The names and attribute chains (`loss`, `self.loss`) an expression mentions."""
    found = {dotted(n) for n in ast.walk(node) if isinstance(n, ast.Name | ast.Attribute)}
    return found - {None, "self", "cls"}


def _loss_slice(func: Function, losses: list[ast.expr], models: set[str]) -> set[ast.AST]:
    """The assignments the scaled losses depend on, by name and earlier line, to a fixed point:
    the statements whose helper calls compute the forward pass. The models are not followed:
    where the model object came from (`model = DataParallel(model)`) is not loss data."""
    needed: dict[str, int] = {}
    for loss in losses:
        for name in _names(loss):
            needed[name] = max(needed.get(name, 0), loss.lineno)
    assigns = [
        s for s in ast.walk(func) if isinstance(s, ast.Assign | ast.AugAssign | ast.AnnAssign)
    ]
    chosen: set[ast.AST] = set(losses)
    changed = True
    while changed:
        changed = False
        for stmt in assigns:
            if stmt in chosen or stmt.value is None:
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = set().union(*(_target_names(t) for t in targets))
            if any(needed.get(n, 0) > stmt.lineno for n in names):
                chosen.add(stmt)
                for name in _names(stmt.value) - models:
                    needed[name] = max(needed.get(name, 0), stmt.lineno)
                changed = True
    return chosen


def _resolve(call: ast.Call, cls: str | None, functions: dict) -> str | None:
    """The same-file function a call reaches: `helper(...)` a module-level one, `self.m(...)` a
    method of the caller's class."""
    name = dotted(call.func)
    if name is None:
        return None
    if "." not in name and name in functions:
        return name
    if cls and name.startswith("self.") and name.count(".") == 1:
        qualified = f"{cls}.{name[5:]}"
        return qualified if qualified in functions else None
    return None


def _aliases(tree: ast.AST, models: set[str]) -> set[str]:
    """The models plus the names that alias or wrap them (`self._pytorch_model = self.model`,
    `ddp = DistributedDataParallel(model)`), to a fixed point."""
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            value = node.value
            source = dotted(value) or (
                dotted(value.args[0]) if isinstance(value, ast.Call) and value.args else None
            )
            if source not in models:
                continue
            for target in node.targets:
                name = dotted(target)
                if name and name not in models:
                    models.add(name)
                    changed = True
    return models


def region_violations(source: str, models: set[str]) -> list[str]:
    """Where migrated code breaks the O1 region invariant: in each training function (one that
    back-propagates a loss through a scaler), every call of an initialized model (`model(...)`,
    `self.model(...)` as given, and the names that alias or wrap them) runs inside an enabled
    `autocast` block, and no `.backward(` does. A model call in a same-file helper that computes
    the scaled loss (found by the loss's data flow) counts too, unless every such call of the
    helper is inside autocast. Messages name the line and the function."""
    tree = ast.parse(source)
    models = _aliases(tree, set(models))
    functions = _functions(tree)
    problems: list[str] = []
    training = {q: fc for q, fc in functions.items() if _scale_receivers(fc[0])}
    helper_sites: dict[str, list[bool]] = {}
    for qualified, (func, cls) in training.items():
        relevant = _loss_slice(func, _scale_receivers(func), models)
        relevant_calls = {
            id(c) for stmt in relevant for c in ast.walk(stmt) if isinstance(c, ast.Call)
        }
        for call, inside in _calls(func):
            name = dotted(call.func)
            if name in models and not inside:
                problems.append(
                    f"line {call.lineno}: `{name}(...)` in {qualified} runs outside autocast"
                )
            if isinstance(call.func, ast.Attribute) and call.func.attr == "backward" and inside:
                problems.append(f"line {call.lineno}: `.backward()` in {qualified} is in autocast")
            passed = [
                dotted(a) for a in [*call.args, *(k.value for k in call.keywords)] if dotted(a)
            ]
            given = sorted(set(passed) & models)
            if given and id(call) in relevant_calls and not inside and name not in models:
                problems.append(
                    f"line {call.lineno}: `{name or 'call'}(..., {given[0]}, ...)` in {qualified}"
                    " computes the scaled loss with the model outside autocast"
                )
            target = _resolve(call, cls, functions)
            if target and target not in training and id(call) in relevant_calls:
                helper_sites.setdefault(target, []).append(inside)
    seen: set[str] = set()
    queue = [h for h, sites in helper_sites.items() if not all(sites)]
    while queue:
        qualified = queue.pop()
        if qualified in seen:
            continue
        seen.add(qualified)
        func, cls = functions[qualified]
        for call, inside in _calls(func):
            if inside:
                continue
            name = dotted(call.func)
            if name in models:
                problems.append(
                    f"line {call.lineno}: `{name}(...)` in {qualified} (computes the scaled loss)"
                    " runs outside autocast"
                )
            target = _resolve(call, cls, functions)
            if target and target not in training:
                queue.append(target)
    return problems


# ---------------------------------------------------------------------------------------------
# Which apex features a file uses (eligibility) and which models go through `initialize`.


@dataclass
class ApexUse:
    """apex features found in one file; `blockers` is empty for an eligible file."""

    amp_calls: set[str] = field(default_factory=set)
    blockers: list[str] = field(default_factory=list)
    init_blockers: list[str] = field(default_factory=list)
    models: set[str] = field(default_factory=set)

    @property
    def uses_apex(self) -> bool:
        return bool(self.amp_calls or self.blockers)


def _target_names(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Tuple | ast.List):
        return set().union(*(_target_names(e) for e in node.elts)) if node.elts else set()
    name = dotted(node)
    return {name} if name else set()


def apex_use(source: str) -> ApexUse:
    """Classify one file's apex use from its source (stdlib ast)."""
    tree = ast.parse(source)
    use = ApexUse()
    amp_aliases: set[str] = set()
    apex_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "apex" or alias.name.startswith("apex."):
                    if alias.name == "apex.amp" and alias.asname:
                        amp_aliases.add(alias.asname)
                    elif alias.name in ("apex", "apex.amp"):
                        apex_aliases.add("apex")
                    else:
                        use.blockers.append(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")
            if top[0] != "apex":
                continue
            if node.module == "apex":
                for alias in node.names:
                    if alias.name == "amp":
                        amp_aliases.add(alias.asname or "amp")
                    else:
                        use.blockers.append(f"apex.{alias.name}")
            elif node.module == "apex.amp":
                use.blockers.append("from apex.amp import " + ", ".join(a.name for a in node.names))
            else:
                use.blockers.append(node.module)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = dotted(node.value)
        if base in amp_aliases or base == "apex.amp":
            attr = node.attr
        elif base in apex_aliases and node.attr != "amp":
            use.blockers.append(f"apex.{node.attr}")
            continue
        else:
            continue
        if attr in ALLOWED_AMP:
            use.amp_calls.add(attr)
        else:
            use.blockers.append(f"amp.{attr}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        base = dotted(node.func.value)
        if not (base in amp_aliases or base == "apex.amp"):
            continue
        if node.func.attr == "initialize":
            use.init_blockers.extend(_initialize_blockers(node))
            if not _optimizers(node):
                use.init_blockers.append("inference-only initialize (no optimizer)")
        elif node.func.attr == "scale_loss":
            for keyword in node.keywords:
                if keyword.arg in ("loss_id", "delay_overflow_check"):
                    use.blockers.append(f"scale_loss({keyword.arg}=)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            if not (isinstance(call.func, ast.Attribute) and call.func.attr == "initialize"):
                continue
            base = dotted(call.func.value)
            if not (base in amp_aliases or base == "apex.amp"):
                continue
            has_optimizers = _optimizers(call)
            for target in node.targets:
                if has_optimizers and isinstance(target, ast.Tuple | ast.List) and target.elts:
                    use.models |= _target_names(target.elts[0])
                else:
                    use.models |= _target_names(target)
    use.blockers = sorted(set(use.blockers + use.init_blockers))
    return use


def _levels(value: ast.expr) -> set[str]:
    """The literal opt_levels an expression can give (`"O2" if fast else "O0"`); none for a
    variable."""
    if isinstance(value, ast.Constant):
        return {str(value.value)}
    if isinstance(value, ast.IfExp):
        return _levels(value.body) | _levels(value.orelse)
    if isinstance(value, ast.BoolOp):
        return set().union(*map(_levels, value.values))
    return set()


def _optimizers(call: ast.Call) -> bool:
    """Whether an `initialize` call is given optimizers (not absent, not None)."""
    given = call.args[1] if len(call.args) > 1 else None
    given = next((k.value for k in call.keywords if k.arg == "optimizers"), given)
    return given is not None and not (isinstance(given, ast.Constant) and given.value is None)


def _initialize_blockers(call: ast.Call) -> list[str]:
    blockers = []
    if len(call.args) > 2:
        blockers.append("initialize(positional options)")
    for keyword in call.keywords:
        value = keyword.value
        literal = value.value if isinstance(value, ast.Constant) else None
        if keyword.arg == "opt_level":
            levels = _levels(value)
            if levels - {"O1", "O0"} or levels == {"O0"}:
                blockers += [f"opt_level {level}" for level in sorted(levels - {"O1"}, key=str)]
        elif keyword.arg == "loss_scale":
            if literal != "dynamic":
                blockers.append("initialize(loss_scale=)")
        elif keyword.arg in ("models", "optimizers"):
            continue
        elif keyword.arg is None:
            blockers.append("initialize(**options)")
        elif keyword.arg not in ALLOWED_INIT_KEYWORDS:
            blockers.append(f"initialize({keyword.arg}=)")
    return blockers


# ---------------------------------------------------------------------------------------------
# Call sites: a rewrite that adds a required parameter must find every caller.


def _required_params(func: Function) -> list[str]:
    """Positional parameters without a default, then keyword-only ones without a default."""
    positional = [*func.args.posonlyargs, *func.args.args]
    required = [a.arg for a in positional[: len(positional) - len(func.args.defaults)]]
    kw_defaults = zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True)
    return required + [a.arg for a, default in kw_defaults if default is None]


def added_parameters(original: str, output: str) -> dict[str, tuple[Function, list[str]]]:
    """Functions (by simple name) whose rewrite gained required parameters."""
    before = {q: f for q, (f, _) in _functions(ast.parse(original)).items()}
    added = {}
    for qualified, (func, _) in _functions(ast.parse(output)).items():
        if qualified in before and not isinstance(func, ast.Module):
            new = [
                p for p in _required_params(func) if p not in _required_params(before[qualified])
            ]
            if new:
                added[func.name] = (func, new)
    return added


def _apex_imports(source: str) -> list[tuple[int, bool]]:
    """(line, guarded) of each module-level `import apex...` / `from apex... import`: guarded
    when it sits in a `try` that catches ImportError (or everything)."""
    out: list[tuple[int, bool]] = []

    def walk(statements: list[ast.stmt], guarded: bool) -> None:
        for node in statements:
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n == "apex" or n.startswith("apex.") for n in names):
                    out.append((node.lineno, guarded))
            elif isinstance(node, ast.Try):
                catches = any(
                    h.type is None or "ImportError" in ast.unparse(h.type)
                    or "Exception" in ast.unparse(h.type)
                    for h in node.handlers
                )  # fmt: skip
                walk(node.body, guarded or catches)
                walk(node.orelse, guarded)
            elif isinstance(node, ast.If):
                walk(node.body, guarded)
                walk(node.orelse, guarded)

    walk(ast.parse(source).body, False)
    return out


def unguarded_apex(original: str, output: str) -> list[str]:
    """An apex import the rewrite left at module level outside the `try` that guarded every
    apex import of the original: the program ran without apex installed and now fails at
    import (``ModuleNotFoundError``)."""
    try:
        before, after = _apex_imports(original), _apex_imports(output)
    except SyntaxError:
        return []
    if not before or not all(guarded for _, guarded in before):
        return []
    return [
        f"line {line}: apex import no longer guarded (fails at import without apex)"
        for line, guarded in after
        if not guarded
    ]


def missed_callers(
    name: str,
    func: Function,
    new: list[str],
    source: str,
    own: bool = True,
    where: Path | None = None,
    changed: Path | None = None,
) -> list[int]:
    """Lines of calls in `source` to `name` (or a variable bound to it) that do not pass every
    parameter in `new`, by keyword or by position. `own`: `source` is the changed file; another
    file that defines a module-level function of that name calls its own by the plain name, and
    one (at `where`) that imports the name from a module file next to it other than `changed`
    (`from .checkpoint import save_checkpoint` in a sibling project's copy) calls that one."""
    tree = ast.parse(source)
    shadowed = not own and any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        for node in tree.body
    )
    if not own and where is not None and changed is not None:
        shadowed = shadowed or any(
            isinstance(node, ast.ImportFrom)
            and node.level > 0
            and any(a.name == name and a.asname in (None, name) for a in node.names)
            and (found := _relative_module(where, node)) is not None
            and found.resolve() != changed.resolve()
            for node in tree.body
        )
    aliases = {name}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and name in _levels_names(node.value):
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    params = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    method = params[:1] == ["self"]
    modules = {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if isinstance(callee, ast.Name) and not shadowed:
            called = callee.id
        elif isinstance(callee, ast.Attribute) and (method or dotted(callee.value) in modules):
            called = callee.attr
        else:
            continue
        bound = isinstance(callee, ast.Attribute) and method
        if called not in aliases:
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            continue
        given = set(params[int(bound) : int(bound) + len(node.args)])
        given |= {k.arg for k in node.keywords}
        if not set(new) <= given:
            lines.append(node.lineno)
    return lines


def _relative_module(path: Path, node: ast.ImportFrom) -> Path | None:
    """The file `from .<module> import ...` in `path` loads, where it exists."""
    folder = path.parent
    for _ in range(node.level - 1):
        folder = folder.parent
    base = folder.joinpath(*(node.module or "").split(".")) if node.module else folder
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if node.module and candidate.is_file():
            return candidate
    return None


def _levels_names(value: ast.expr) -> set[str]:
    """The plain names an assigned value can be (`f`, `f if fast else g`)."""
    if isinstance(value, ast.Name):
        return {value.id}
    if isinstance(value, ast.IfExp):
        return _levels_names(value.body) | _levels_names(value.orelse)
    return set()


def signature_breaks(
    scratch: Path, corpus: Path, changed: list[str], scope: dict[str, list[str]]
) -> dict[str, list[str]]:
    """For each changed file, the callers (in its project: `scope` maps a file to the subtrees
    its manifest entry brings) that a parameter added by the rewrite leaves without an argument:
    a TypeError at run time."""
    problems: dict[str, list[str]] = {}
    for rel in changed:
        try:
            added = added_parameters(
                (corpus / rel).read_text(encoding="utf-8", errors="replace"),
                (scratch / rel).read_text(encoding="utf-8", errors="replace"),
            )
        except SyntaxError:
            continue
        for name, (func, new) in added.items():
            paths = [scratch / root for root in scope[rel]]
            files = [f for p in paths for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
            for path in files:
                text = path.read_text(encoding="utf-8", errors="replace")
                if name not in text:
                    continue
                try:
                    lines = missed_callers(
                        name, func, new, text, path == scratch / rel, path, scratch / rel
                    )
                except SyntaxError:
                    continue
                where = path.relative_to(scratch).as_posix()
                problems.setdefault(rel, []).extend(
                    f"`{name}` gained `{', '.join(new)}` but {where}:{line} does not pass it"
                    for line in lines
                )
    return problems


# ---------------------------------------------------------------------------------------------
# Running ampmigrate and classifying.


SETTING: list[str] = []  # ["--apex-opt-level", "O1"]: every repository declares it


def ampmigrate(*args: str) -> tuple[list[dict], dict[str, str]]:
    """Run the installed ampmigrate with JSON output; return its findings and, by file, the
    errors it printed (an internal error on a file is a result, not a reason to stop)."""
    command = [sys.executable, "-m", "ampmigrate", *args, *SETTING]
    result = subprocess.run(
        [*command, "--output-format", "json", "--exit-zero"],
        capture_output=True,
        text=True,
    )
    errors = {}
    for line in result.stderr.splitlines():
        path, sep, message = line.partition(": error: ")
        if sep:
            errors[str(Path(path).resolve())] = message
    if not result.stdout.strip() and result.returncode != 0:
        raise SystemExit(f"ampmigrate {' '.join(args[:3])} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout or "[]"), errors


def shorten(message: str, width: int = 140) -> str:
    text = message.removeprefix(REFUSAL_PREFIX).removeprefix(": ").strip().replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def compiles(source: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<migrated>", "exec")
    except SyntaxError as error:
        return f"does not compile: {error.msg} (line {error.lineno})"
    return None


def build_corpus(manifest: dict, git_root: Path, corpus: Path) -> None:
    """Extract each entry's subtrees (.py files only) at its commit from local git dirs."""
    for entry in manifest["entries"]:
        owner, name = entry["repo"].split("/")
        key = f"{owner}+{name}"
        candidates = [git_root / key / "repo", git_root / key, git_root / name]
        git_dir = next((c for c in candidates if c.exists()), None)
        if git_dir is None:
            raise SystemExit(f"{entry['repo']}: no git directory under {git_root}")
        roots = [r for r in entry["roots"] if r]
        if not (git_dir / "HEAD").exists():
            git_dir = git_dir / ".git"
        git = ["git", f"--git-dir={git_dir}"]
        listing = subprocess.run(
            [*git, "ls-tree", "-r", "-z", "--name-only", entry["commit"], "--", *roots],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for path in filter(None, listing.split("\0")):
            if not path.endswith(".py"):
                continue
            blob = subprocess.run(
                [*git, "show", f"{entry['commit']}:{path}"], capture_output=True, check=True
            ).stdout
            (corpus / key / path).parent.mkdir(parents=True, exist_ok=True)
            (corpus / key / path).write_bytes(blob)
        for path in entry["files"]:
            if not (corpus / key / path).exists():
                raise SystemExit(f"{entry['repo']}@{entry['commit']}: {path} missing")


@dataclass
class Row:
    file: str
    eligible: bool | None
    outcome: str
    reason: str
    why_ineligible: str = ""
    details: list[str] = field(default_factory=list)
    split: str = ""
    migrate: bool | None = None  # the hand judgement; None where the file has none
    judged_why: str = ""

    @property
    def migratable(self) -> bool | None:
        """The hand judgement where there is one, else the automatic eligibility."""
        return self.migrate if self.migrate is not None else self.eligible


def select(manifest: dict, split: str) -> dict:
    """The manifest's entries of one split (`all`: every entry)."""
    entries = [e for e in manifest["entries"] if split == "all" or e.get("split") == split]
    return {**manifest, "entries": entries}


def classify(corpus: Path, manifest: dict, keep: Path | None = None) -> tuple[list[Row], str]:
    """Run fix on a scratch copy of the corpus and classify every benchmarked file; `keep`
    receives a copy of the migrated corpus (to diff against the original)."""
    version = _version()
    started = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}"
    with tempfile.TemporaryDirectory(prefix="apexbench-") as tmp:
        scratch = Path(tmp) / "corpus"
        scratch.mkdir()
        for key in sorted({"+".join(e["repo"].split("/")) for e in manifest["entries"]}):
            shutil.copytree(corpus / key, scratch / key)
        remaining, fix_errors = ampmigrate(
            "fix", "--unsafe-fixes", "--select", "AMP30", str(scratch)
        )
        by_file: dict[str, list[dict]] = {}
        for finding in remaining:
            rel = Path(finding["filename"]).resolve().relative_to(scratch.resolve()).as_posix()
            by_file.setdefault(rel, []).append(finding)
        targets: list[tuple[int, str]] = []
        prefixes: list[tuple[str, int]] = []
        for index, entry in enumerate(manifest["entries"]):
            repo = "+".join(entry["repo"].split("/"))
            targets += [(index, f"{repo}/{path}") for path in entry["files"]]
            prefixes += [(f"{repo}/{root}", index) for root in entry["roots"]]
        target_set = {t for _, t in targets}
        changed = [
            p.relative_to(scratch).as_posix()
            for p in sorted(scratch.rglob("*.py"))
            if p.read_bytes() != (corpus / p.relative_to(scratch)).read_bytes()
        ]
        to_check = sorted(target_set | set(changed))
        before, _ = ampmigrate("check", *(str(corpus / f) for f in to_check))
        after, check_errors = ampmigrate("check", *(str(scratch / f) for f in to_check))
        codes_before: dict[str, set[str]] = {}
        for finding in before:
            rel = Path(finding["filename"]).resolve().relative_to(corpus.resolve()).as_posix()
            codes_before.setdefault(rel, set()).add(finding["code"])
        new_after: dict[str, list[str]] = {}
        for finding in after:
            rel = Path(finding["filename"]).resolve().relative_to(scratch.resolve()).as_posix()
            if finding["code"] not in codes_before.get(rel, set()):
                if finding["code"] == "AMP208" and not apex_checkpointed(corpus / rel):
                    continue  # apex never saved its scale here either: its own gap (#20 item 6)
                new_after.setdefault(rel, []).append(
                    f"check: {finding['code']} line {finding['location']['row']}: "
                    + shorten(finding["message"], 100)
                )
        for path, message in check_errors.items():
            rel = Path(path).relative_to(scratch.resolve()).as_posix()
            new_after.setdefault(rel, []).insert(0, f"check on the output: {message}")
        for path, message in fix_errors.items():
            rel = Path(path).relative_to(scratch.resolve()).as_posix()
            by_file.setdefault(rel, []).append(
                {"code": "AMP303", "message": f"fix crashed: {message}", "fix": None}
            )
        scope = {}
        for rel in changed:
            entry = next((i for p, i in prefixes if rel.startswith(p)), None)
            roots = [p for p, i in prefixes if i == entry] or [rel.split("/", 1)[0]]
            scope[rel] = [root.rstrip("/") for root in roots]
        for rel, broken in signature_breaks(scratch, corpus, changed, scope).items():
            new_after.setdefault(rel, [])[:0] = broken
        models_by_repo: dict[int, set[str]] = {}
        uses: dict[str, ApexUse] = {}
        init_blockers: dict[int, set[str]] = {}
        for key, rel in targets:
            uses[rel] = apex_use((corpus / rel).read_text(encoding="utf-8", errors="replace"))
            models_by_repo.setdefault(key, set()).update(uses[rel].models)
            init_blockers.setdefault(key, set()).update(uses[rel].init_blockers)
        for key, rel in targets:
            # A file that scales the loss of a model initialized elsewhere has that O-level.
            use = uses[rel]
            if "scale_loss" in use.amp_calls and "initialize" not in use.amp_calls:
                inherited = init_blockers[key] - {"inference-only initialize (no optimizer)"}
                use.blockers = sorted(set(use.blockers) | {f"{b} (elsewhere)" for b in inherited})
        rows = []
        for key, rel in targets:
            use = uses[rel]
            row = judge(rel, corpus, scratch, use, models_by_repo[key], by_file, new_after, True)
            entry = manifest["entries"][key]
            verdict = entry.get("judgement", {}).get(rel.split("/", 1)[1])
            row.split = entry.get("split", "")
            if verdict is not None:
                row.migrate, row.judged_why = verdict["migrate"], verdict["why"]
            rows.append(row)
        for rel in changed:
            if rel in target_set:
                continue
            original = (corpus / rel).read_text(encoding="utf-8", errors="replace")
            use = apex_use(original)
            key = next((i for prefix, i in prefixes if rel.startswith(prefix)), -1)
            row = judge(
                rel, corpus, scratch, use, models_by_repo.get(key, set()), by_file, new_after, False
            )
            row.split = manifest["entries"][key].get("split", "") if key >= 0 else ""
            rows.append(row)
        if keep:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(scratch, keep)
    return rows, f"{started}, {version}"


def _version() -> str:
    """The ampmigrate that ran: its checkout's commit, `+dirty` with uncommitted package edits."""
    package = Path(
        subprocess.run(
            [sys.executable, "-c", "import ampmigrate; print(ampmigrate.__file__)"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    ).parent
    git = ["git", "-C", str(package)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if commit.returncode != 0:
        return "ampmigrate (not a checkout)"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True)
    setting = f", setting apex-opt-level {SETTING[1]}" if SETTING else ""
    return (
        f"ampmigrate at {commit.stdout.strip()}{'+dirty' if dirty.stdout.strip() else ''}{setting}"
    )


def apex_checkpointed(path: Path) -> bool:
    """The original saved or restored apex's loss scale (``amp.state_dict()`` and kin); where
    it did not, a resumed run restarted the scale under apex too, and AMP208 on the rewrite
    reports that gap, not a new one."""
    if not path.exists():
        return True
    text = path.read_text(encoding="utf-8", errors="replace")
    return re.search(r"\bamp\s*\.\s*(load_)?state_dict\b", text) is not None


def judge(
    rel: str,
    corpus: Path,
    scratch: Path,
    use: ApexUse,
    repo_models: set[str],
    by_file: dict[str, list[dict]],
    new_after: dict[str, list[str]],
    target: bool,
) -> Row:
    original = (corpus / rel).read_text(encoding="utf-8", errors="replace")
    output = (scratch / rel).read_text(encoding="utf-8", errors="replace")
    eligible = not use.blockers if target else None
    why = ", ".join(use.blockers)
    full = [
        f["message"] for f in by_file.get(rel, []) if f["code"] == "AMP303" and f.get("fix") is None
    ]
    refusals = [shorten(m) for m in full]
    amp_left = apex_use(output).amp_calls if compiles(output) is None else set()
    if output == original:
        if refusals:
            return Row(rel, eligible, "refused", "; ".join(dict.fromkeys(refusals)), why, full)
        codes = sorted({f["code"] for f in by_file.get(rel, [])})
        return Row(
            rel, eligible, "refused", "unchanged; " + (", ".join(codes) or "no finding"), why
        )
    problems = []
    error = compiles(output)
    if error:
        problems.append(error)
    problems += new_after.get(rel, [])
    models = use.models or repo_models
    if error is None:
        problems += region_violations(output, models) + unguarded_apex(original, output)
    if problems:
        return Row(rel, eligible, "wrong", problems[0], why, problems)
    if amp_left:
        reason = "; ".join(dict.fromkeys(refusals)) or "partly: amp." + ", amp.".join(
            sorted(amp_left)
        )
        return Row(rel, eligible, "refused", reason, why)
    # The invariant must see a forward to vouch for the region: the original, without autocast,
    # shows each forward it checks as a violation.
    checked = "scale_loss" not in use.amp_calls or region_violations(original, models)
    note = "" if checked else "invariant found no model call to check"
    return Row(rel, eligible, "rewritten", note, why)


def summary(rows: list[Row], split: str) -> str:
    """One split's figures: the files judged migratable that are rewritten, the wrong
    rewrites, the rewrites of files judged not migratable, the files with no finding."""
    targets = [r for r in rows if r.eligible is not None]
    migratable = [r for r in targets if r.migratable]
    rewritten = [r for r in migratable if r.outcome == "rewritten"]
    against = [r for r in targets if r.migratable is False and r.outcome == "rewritten"]
    silent = [r for r in targets if r.reason == "unchanged; no finding"]
    wrong = [r for r in rows if r.outcome == "wrong"]
    basis = "judged" if all(r.migrate is not None for r in targets) else "eligible (automatic)"
    rate = 100 * len(rewritten) / len(migratable) if migratable else 0.0
    repos = len({r.file.split("/", 1)[0] for r in targets})
    return (
        f"{split}: {len(targets)} files of {repos} repositories, {len(migratable)} {basis}"
        f" migratable, {len(rewritten)}/{len(migratable)} rewritten ({rate:.0f} %),"
        f" {len(wrong)} wrong, {len(against)} rewritten though judged not migratable,"
        f" {len(silent)} with no finding"
    )


def _mark(r: Row) -> str:
    if r.eligible is None:
        return "sibling"
    if r.migrate is not None:
        return "yes" if r.migrate else "no"
    return "yes" if r.eligible else f"no ({r.why_ineligible})"


def report(rows: list[Row], stamp: str, markdown: bool, show_heldout: bool = False) -> str:
    """The per-file table (the held-out half's rows only with `show_heldout`) and one summary
    line per split."""
    splits = [s for s in SPLITS if any(r.split == s for r in rows)]
    splits += sorted({r.split for r in rows} - set(SPLITS))
    lines = []
    for split in splits:
        part = [r for r in rows if r.split == split]
        if split == "heldout" and not show_heldout:
            lines += [f"## {split}: per-file rows withheld (--show-heldout shows them)", ""]
            continue
        if markdown:
            lines += [
                f"## {split}",
                "",
                "| file | migrate | outcome | reason |",
                "|---|---|---|---|",
            ]
        for r in part:
            repo, _, path = r.file.partition("/")
            if markdown:
                reason = r.reason.replace("|", "\\|")
                name = f"{repo.replace('+', '/', 1)} `{path}`"
                lines.append(f"| {name} | {_mark(r)} | {r.outcome} | {reason} |")
                continue
            lines.append(f"{r.file}\t{_mark(r).split(' ')[0]}\t{r.outcome}\t{r.reason}")
            if r.judged_why:
                lines.append(f"\t\tjudged: {r.judged_why}")
            elif r.eligible is False:
                lines.append(f"\t\tineligible: {r.why_ineligible}")
            for detail in r.details[1:]:
                lines.append(f"\t\t{detail}")
        lines.append("")
    lines.append(f"{stamp}:")
    lines += [summary([r for r in rows if r.split == split], split) for split in splits]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--split", choices=[*SPLITS, "all"], default="all")
    parser.add_argument(
        "--show-heldout", action="store_true", help="list the held-out half's files too"
    )
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--keep", type=Path, help="copy the migrated corpus here")
    parser.add_argument(
        "--build-from",
        type=Path,
        metavar="GIT_ROOT",
        help="extract the corpus from local git directories, then stop",
    )
    parser.add_argument(
        "--apex-opt-level",
        choices=["O1"],
        help="run fix and check as if every repository declared this level (the setting)",
    )
    args = parser.parse_args(argv)
    if args.apex_opt_level:
        SETTING[:] = ["--apex-opt-level", args.apex_opt_level]
    manifest = json.loads(args.manifest.read_text())
    if args.build_from:
        build_corpus(manifest, args.build_from, args.corpus)
        return 0
    rows, stamp = classify(args.corpus, select(manifest, args.split), args.keep)
    print(report(rows, stamp, args.markdown, args.show_heldout))
    if args.json:
        shown = [r for r in rows if args.show_heldout or r.split != "heldout"]
        args.json.write_text(json.dumps([r.__dict__ for r in shown], indent=1))
    return 1 if any(r.outcome == "wrong" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
