"""The opt level of `amp.initialize`: O1 only where provable (a literal, a module constant, a
flag whose `choices` stay within O0/O1, an `if` around it that tests it equal to "O1", a
default every caller keeps); O0 is apex off (`enabled=<level> == "O1"`); anything else is
refused with where the level comes from, or taken as O1 where the setting `apex-opt-level`
declares it."""

from __future__ import annotations

import os

import libcst as cst

from ampmigrate.apex.common import (
    _argument,
    _code,
    _is_call_of,
    given_at,
    is_path,
    parameter_places,
)
from ampmigrate.apex.initialize import _literal
from ampmigrate.apex.users import calls_keep_default, level_elsewhere
from ampmigrate.findings import DECLARE_LEVEL


def _branch_levels(switch: cst.IfExp) -> list[str | None]:
    """The level each arm of a conditional gives (None: not a string literal)."""
    return [
        b.evaluated_value if isinstance(b, cst.SimpleString) else None
        for b in (switch.body, switch.orelse)
    ]


def _operands(comparison: cst.Comparison) -> list[cst.BaseExpression]:
    return [comparison.left, *(c.comparator for c in comparison.comparisons)]


def _got(level: cst.CSTNode) -> cst.Call | None:
    """``config.get("opt_level", "O0")``: a mapping read by a constant key, with a literal
    default (a Ray Tune trainable's config dict; without one, a missing key is None, which
    apex raised on)."""
    if not (
        isinstance(level, cst.Call)
        and isinstance(level.func, cst.Attribute)
        and level.func.attr.value == "get"
        and len(level.args) == 2
        and all(a.keyword is None and not a.star for a in level.args)
        and isinstance(level.args[0].value, cst.SimpleString)
        and all(isinstance(a.value, cst.SimpleString) for a in level.args[1:])
    ):
        return None
    return level


def _digit_of(level: cst.CSTNode) -> cst.Attribute | None:
    """The attribute a level spells after its "O": ``f"O{args.level}"``, ``"O%d" % args.level``
    (``%i`` too), ``"O" + str(args.level)``; None: another expression."""
    digit = None
    if isinstance(level, cst.FormattedString) and len(level.parts) == 2:
        text, part = level.parts
        if (
            isinstance(text, cst.FormattedStringText)
            and text.value == "O"
            and isinstance(part, cst.FormattedStringExpression)
            and part.conversion is None
            and part.format_spec is None
        ):
            digit = part.expression
    elif isinstance(level, cst.BinaryOperation) and isinstance(level.left, cst.SimpleString):
        left = level.left.evaluated_value
        if isinstance(level.operator, cst.Modulo) and left in ("O%d", "O%i"):
            digit = level.right
        elif (
            isinstance(level.operator, cst.Add)
            and left == "O"
            and isinstance(level.right, cst.Call)
            and isinstance(level.right.func, cst.Name)
            and level.right.func.value == "str"
            and len(level.right.args) == 1
        ):
            digit = level.right.args[0].value
    return digit if isinstance(digit, cst.Attribute) else None


def _kept_int(flag: cst.Call, attr: str, nodes) -> bool:
    """``flag`` is an int flag (stored as ``attr``) that nothing in ``nodes`` assigns again."""
    kind = _argument(flag, "type", 99)
    return (
        isinstance(kind, cst.Name)
        and kind.value == "int"
        and not any(
            isinstance(n, cst.AssignTarget | cst.AugAssign)
            and isinstance(n.target, cst.Attribute)
            and n.target.attr.value == attr
            for n in nodes
        )
    )


def _open_bit(flag: cst.Call) -> bool:
    """``flag`` has no ``choices`` and its default is none, 0 or 1: the setting may read it
    as a level's number."""
    default = _argument(flag, "default", 99)
    return _argument(flag, "choices", 99) is None and (
        default is None or (isinstance(default, cst.Integer) and default.evaluated_value in (0, 1))
    )


def _plain(level: cst.CSTNode) -> bool:
    """``level`` reads a value without computing one: a chain of names, attributes and
    subscripts by a constant (``args.opt_level``, ``config["amp"]["opt_level"]``), or a
    ``.get`` of such a mapping by a constant key."""
    if (got := _got(level)) is not None:
        level = got.func.value  # type: ignore[attr-defined]
    while isinstance(level, cst.Attribute | cst.Subscript):
        if isinstance(level, cst.Subscript) and not (
            len(level.slice) == 1
            and isinstance(level.slice[0].slice, cst.Index)
            and isinstance(level.slice[0].slice.value, cst.SimpleString | cst.Integer)
        ):
            return False
        level = level.value
    return isinstance(level, cst.Name)


def _tests_o1(module: cst.Module, test: cst.BaseExpression, spelled: str) -> bool:
    """``test`` is true only where ``spelled`` is "O1": ``x == "O1"`` (either way round),
    ``x in ("O1",)``, or one operand of an ``and`` that is."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _tests_o1(module, test.left, spelled) or _tests_o1(module, test.right, spelled)
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    if isinstance(target.operator, cst.Equal):
        pairs = ((left, right), (right, left))
        return any(
            _code(module, a) == spelled
            and isinstance(b, cst.SimpleString)
            and b.evaluated_value == "O1"
            for a, b in pairs
        )
    if isinstance(target.operator, cst.In) and isinstance(right, cst.Tuple | cst.List | cst.Set):
        values = [e.value for e in right.elements]
        return (
            _code(module, left) == spelled
            and bool(values)
            and all(isinstance(v, cst.SimpleString) and v.evaluated_value == "O1" for v in values)
        )
    return False


class Levels:
    """Mixed into ``_Planner`` after ``Initialize``."""

    def _constant(self, value: cst.BaseExpression, init: cst.Call) -> cst.BaseExpression:
        """``value``, or the literal a plain name holds at ``initialize``: its one assignment
        in the same scope comes before the call (``opt_level = "O1"`` two lines above), and
        nothing else binds the name (no ``global``/``nonlocal``, no parameter, no loop)."""
        if is_path(value) and isinstance(value, cst.Subscript):
            return self._keyed_constant(value)
        if not isinstance(value, cst.Name) or value.value in ("True", "False", "None"):
            return value
        name = value.value
        if any(
            isinstance(n, cst.Global | cst.Nonlocal) and name in {m.name.value for m in n.names}
            for n in self.nodes
        ):
            return value
        _, assign = self._single_store(name, init)
        if (
            assign is not None
            and _literal(assign.value)
            and self.function(assign) is self.function(init)
        ):
            return assign.value
        return value

    def _keyed_constant(self, value: cst.Subscript) -> cst.BaseExpression:
        """``self.args["amp_level"]`` where the file binds ``self.args`` once, to a dict literal
        whose entry for that key is a literal, and changes it nowhere (no item store, no method
        call on it): that literal (HashRetrieval's ``{'amp_level': 'O2'}``, which the setting
        would otherwise have declared O1)."""
        base = _code(self.module, value.value)
        key = value.slice[0].slice.value
        stores = [
            n for n in self.nodes
            if isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
            and _code(self.module, n.target).startswith(base)
        ]  # fmt: skip
        changed = any(
            isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
            and _code(self.module, n.func.value) == base
            for n in self.nodes
        )  # fmt: skip
        if changed or len(stores) != 1 or _code(self.module, stores[0].target) != base:
            return value
        assign = self.parent(stores[0])
        literal = assign.value if isinstance(assign, cst.Assign) else None
        if not isinstance(literal, cst.Dict) or any(
            isinstance(e, cst.StarredDictElement) for e in literal.elements
        ):
            return value
        found = [
            e.value for e in literal.elements
            if _code(self.module, e.key) == _code(self.module, key)
            or (isinstance(e.key, cst.SimpleString) and isinstance(key, cst.SimpleString)
                and e.key.evaluated_value == key.evaluated_value)
        ]  # fmt: skip
        return found[0] if len(found) == 1 and _literal(found[0]) else value

    def _single_store(self, name: str, init: cst.Call) -> tuple[list[cst.Name], cst.Assign | None]:
        """The references to ``name`` in the scope of ``initialize`` (keyword and attribute
        names aside), and its assignment ``name = <value>`` where that is the only store of the
        name there and comes before the call (None otherwise)."""
        refs = [
            n for n in self._subtree(self.function(init))
            if isinstance(n, cst.Name) and n.value == name
            and not (isinstance(self.parent(n), cst.Arg) and self.parent(n).keyword is n)
            and not (isinstance(self.parent(n), cst.Attribute) and self.parent(n).attr is n)
        ]  # fmt: skip
        stores = [n for n in refs if not self._read(n)]
        assign = self.parent(self.parent(stores[0])) if len(stores) == 1 else None
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and assign.targets[0].target is stores[0]
            and self.order[id(assign)] < self.order[id(init)]
        ):
            return refs, assign
        return refs, None

    def _level_switch(self, level: cst.CSTNode, init: cst.Call) -> cst.BaseExpression | None:
        """``level = "O1" if x else "O0"``, assigned once before ``initialize``: O0 is apex
        switched off, so the GradScaler and autocast are ``enabled=x`` (and the assignment goes
        when only ``initialize`` read it), else ``enabled=level == "O1"``. A branch naming
        another level blocks; anything else is None (taken as O1, with a note). The same
        conditional written at the keyword (``opt_level="O1" if fp16 else "O0"``, the 42nd
        review: "not provably O1", where the assigned form was taken) is that switch too."""
        if isinstance(level, cst.IfExp):
            values = _branch_levels(level)
            if self._names_another_level(init, _code(self.module, level), values):
                return None
            if sorted(v or "" for v in values) != ["O0", "O1"]:
                return None  # (one level either way, or a computed one: read as any other)
            return self._where_o1(level, values)
        if not isinstance(level, cst.Name):
            return None
        refs, assign = self._single_store(level.value, init)
        if assign is None or not isinstance(assign.value, cst.IfExp):
            return None
        levels = _branch_levels(assign.value)
        if None in levels or self._names_another_level(assign, level.value, levels):
            return None
        if set(levels) != {"O0", "O1"}:
            return None  # one level either way: the plain reading (a note) says it
        reads = [n for n in refs if n is not assign.targets[0].target]
        if len(reads) != 1 or not self.within(reads[0], init):
            return cst.parse_expression(f'{level.value} == "O1"')  # the name stays, read later
        self._remove_statement(self.statement(assign))
        return self._where_o1(assign.value, levels)

    def _names_another_level(self, node: cst.CSTNode, shown: str, levels: list) -> bool:
        """One of a switch's ``levels`` is O2 or O3: said at ``node``."""
        other = [v for v in levels if v is not None and v not in ("O0", "O1")]
        if other:
            self.problem(
                node,
                f'opt_level `{shown}` may be "{other[0]}": only O1 (autocast + GradScaler) '
                "exists in torch.amp; O2/O3 cast the model, which native AMP does not do",
            )
        return bool(other)

    def _where_o1(self, switch: cst.IfExp, levels: list) -> cst.BaseExpression:
        """The test under which ``switch`` (an O0/O1 conditional, ``levels`` its two values)
        gives O1."""
        if levels == ["O1", "O0"]:
            return switch.test
        return cst.UnaryOperation(
            cst.Not(), cst.parse_expression(f"({_code(self.module, switch.test)})")
        )

    def _flag_read(self, level: cst.BaseExpression) -> str | None:
        """The flag of this file that a computed level reads (``f"O{args.amp_level}"``)."""
        for node in self._subtree(level):
            if isinstance(node, cst.Attribute) and (flag := self._flag_of(node.attr.value)):
                return flag[0]
        return None

    def _flag_of(self, attr: str) -> tuple[str, cst.Call] | None:
        """The ``add_argument`` call of this file whose destination is ``attr`` (its long
        option, or ``attr``, and the call): ``arg = parser.add_argument`` then ``arg(...)``
        counts too."""
        aliases = {
            t.target.value
            for n in self.nodes
            if isinstance(n, cst.Assign)
            and isinstance(n.value, cst.Attribute)
            and n.value.attr.value == "add_argument"
            for t in n.targets
            if isinstance(t.target, cst.Name)
        }
        flag = None
        for node in self.nodes:
            adds = _is_call_of(node, "add_argument") or (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Name)
                and node.func.value in aliases
            )
            if isinstance(node, cst.Call) and adds:
                options = [a.value for a in node.args if not a.keyword]
                names = [o.evaluated_value for o in options
                         if isinstance(o, cst.SimpleString)]  # fmt: skip
                dest = _argument(node, "dest", 99)
                long = next((n for n in names if n.startswith("--")), None)
                derived = (
                    dest.evaluated_value if isinstance(dest, cst.SimpleString)
                    else long[2:].replace("-", "_") if long else None
                )  # fmt: skip
                if derived == attr:
                    flag = (long or attr, node)
        return flag

    def _module_constant(self, level: cst.Name) -> bool:
        """``LEVEL = "O1"`` at module level, the only binding of the name in the file (no
        parameter, local, loop variable, import or ``global`` of it): the level is O1."""
        name = level.value
        bindings = []
        for node in self.nodes:
            if isinstance(node, cst.Name) and node.value == name:
                parent = self.parent(node)
                if isinstance(
                    parent,
                    cst.AssignTarget
                    | cst.AugAssign
                    | cst.Param
                    | cst.For
                    | cst.AsName
                    | cst.NamedExpr
                    | cst.CompFor
                    | cst.NameItem,
                ):
                    bindings.append(parent)  # fmt: skip
                elif isinstance(parent, cst.Tuple | cst.List | cst.Element | cst.StarredElement):
                    return False  # (unpacked into: not followed)
            elif isinstance(node, cst.FunctionDef | cst.ClassDef) and node.name.value == name:
                return False
        if len(bindings) != 1 or not isinstance(bindings[0], cst.AssignTarget):
            return False
        assign = self.parent(bindings[0])
        return (
            isinstance(assign, cst.Assign)
            and self.parent(self.parent(assign)) is self.module
            and isinstance(assign.value, cst.SimpleString)
            and assign.value.evaluated_value == "O1"
        )

    def _level_choices(
        self, level: cst.CSTNode, init: cst.Call
    ) -> cst.BaseExpression | bool | None:
        """An opt level read from a flag is O1 only where the flag cannot say otherwise: its
        ``add_argument`` in this file has ``choices`` within O0/O1 and nothing assigns it
        again. O0 is apex switched off, so a possible O0 that no ``if <level> != "O0":``
        around ``initialize`` excludes gives ``enabled=<level> == "O1"``. Anything else
        (a config value, a parameter, a flag that accepts O2/O3) is not provably O1: O2/O3 cast
        the model and keep fp32 master weights, which torch.amp cannot express, so a rewrite
        "as O1" would change those runs. True: O1 for sure; None: refused (said here)."""
        spelled = _code(self.module, level)
        if self._pinned_o1(spelled, init):
            return True
        digit = _digit_of(level)
        counted = self._flag_of(digit.attr.value) if digit is not None else None
        if digit is not None:
            switch = self._digit_choices(digit, counted, init)
            if switch is not None:
                return switch
        attr = level.attr.value if isinstance(level, cst.Attribute) else None
        flag, reassigned = None, False
        if attr is not None:
            flag = self._flag_of(attr)
            reassigned = any(
                isinstance(n, cst.AssignTarget | cst.AugAssign)
                and isinstance(n.target, cst.Attribute)
                and n.target.attr.value == attr
                and not self.dead(n)  # (`if amp is None: args.opt_level = "O0"` goes)
                and not self._copies_flag(n, attr)
                for n in self.nodes
            )
        levels, taken = None, None
        if flag is not None and not reassigned:
            choices = _argument(flag[1], "choices", 99)
            elements = (
                choices.elements if isinstance(choices, cst.List | cst.Tuple | cst.Set) else ()
            )
            values = {e.value.evaluated_value for e in elements
                      if isinstance(e.value, cst.SimpleString)}  # fmt: skip
            if elements and len(values) == len(elements) and values <= {"O0", "O1"}:
                levels = values
        if levels is None and flag is None and self._default_everywhere(level, init):
            levels = {"O1"}
        if levels is None and isinstance(level, cst.Name) and self._module_constant(level):
            levels = {"O1"}
        given = self._given_levels(level, init) if levels is None else None
        if given is not None and given[0] <= {"O0", "O1"}:
            levels = given[0]
        if levels is None:
            if counted is not None:  # `f"O{args.level}"` of an int flag
                choices = _argument(counted[1], "choices", 99)
                origin = (
                    f'the flag `{counted[0]}` after an "O", whose choices '
                    f"`{_code(self.module, choices)}` are not within 0/1"
                    if choices is not None
                    else f'the flag `{counted[0]}` after an "O", which accepts any number '
                    "(no `choices`)"
                )
            elif flag is not None:
                choices = _argument(flag[1], "choices", 99)
                origin = (
                    f"the flag `{flag[0]}`, whose choices `{_code(self.module, choices)}` are not "
                    "within O0/O1"
                    if choices is not None
                    else f"the flag `{flag[0]}`, which accepts any level (no `choices`)"
                )
                if reassigned:
                    origin = f"the flag `{flag[0]}`, reassigned in this file"
            elif given is not None:
                shown = ", ".join(f'"{v}" (line {line})' for line, v in given[1])
                origin = f"the parameter `{level.value}`, which the calls of this file give {shown}"
            elif isinstance(level, cst.Name) and any(
                isinstance(p, cst.Param) and p.name.value == level.value for p in self.nodes
            ):
                origin = f"the parameter `{level.value}`: a caller may pass any level"
            elif isinstance(level, cst.Name):
                origin = f"`{spelled}`, whose value the rewrite cannot trace to O0/O1 in this file"
            elif not _plain(level) and (param := self._parameter_read(level, init)) is not None:
                default = (
                    f" (default `{_code(self.module, param.default)}`)"
                    if param.default is not None else ""
                )  # fmt: skip
                origin = (
                    f"`{spelled}`, computed from the parameter `{param.name.value}`{default}: "
                    "a caller may pass any level"
                )
            elif any(isinstance(n, cst.Call) for n in self._subtree(level)):
                origin = f"`{spelled}`, a call whose result the rewrite does not evaluate"
            elif (read := self._flag_read(level)) is not None:
                origin = f"`{spelled}`, computed from this file's flag `{read}`"
            elif not any(  # nothing here stores into it (`CONFIG = {"level": "O2"}` does)
                isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
                and _code(self.module, n.target).split("[")[0].split(".")[0]
                == spelled.split("[")[0].split(".")[0]
                for n in self.nodes
            ):
                origin = f"`{spelled}`, set outside this file (a config, an argument)"
            else:
                origin = f"`{spelled}`, whose value the rewrite cannot trace to O0/O1 in this file"
            branches = [
                n for n in self.nodes if isinstance(n, cst.Comparison)
                and any(self._other_level(o) for o in _operands(n))
                and spelled in {_code(self.module, o) for o in _operands(n)}
                and not self._any_level(n)
            ]  # fmt: skip
            also = (
                f"; this file itself branches on `{_code(self.module, branches[0])}` at line "
                f"{self.line(branches[0])}"
                if branches
                else ""
            )
            uncovered = also or (
                ""  # (the setting takes an int flag whose default is 0 or 1: _digit_choices)
                if counted is not None
                and _kept_int(counted[1], digit.attr.value, self.nodes)
                and _open_bit(counted[1])
                else self._uncovered(level, init, flag, reassigned)
            )
            if self.declared is None or uncovered:
                self.problem(init, self._not_o1(spelled, origin, also, uncovered, counted))
                return None
            levels, taken = {"O0", "O1"}, origin
        guards = [a.test for a in self.ancestors(init) if isinstance(a, cst.If)
                  and self.within(init, a.body)]  # fmt: skip
        excluded = any(
            isinstance(t, cst.Comparison) and _code(self.module, t.left) == spelled
            and len(t.comparisons) == 1 and isinstance(t.comparisons[0].operator, cst.NotEqual)
            and isinstance(t.comparisons[0].comparator, cst.SimpleString)
            and t.comparisons[0].comparator.evaluated_value == "O0"
            for t in guards
        )  # fmt: skip
        if taken is not None:
            trains = _argument(init, "optimizers", 1) is not None
            run = (
                f"as O1 ({'autocast + GradScaler' if trains else 'autocast'}, with fp32 weights)"
                if excluded
                else 'in float32, without mixed precision (it is on only where the level is "O1")'
            )
            self.plan.notes.append(
                f"behaviour change: opt_level `{spelled}` comes from {taken}; the setting "
                f"`apex-opt-level` ({self.declared}) takes it as O1 or O0, so a run given O2/O3 "
                f"now {'trains' if trains else 'runs'} {run}, and so does a run given a level "
                'apex raised on (a typo such as "01"), without the error'
            )
        if levels == {"O1"} or excluded:
            return True
        return cst.parse_expression(f'{spelled} == "O1"')

    def _given_levels(
        self, level: cst.CSTNode, init: cst.Call
    ) -> tuple[set[str], list[tuple[int, str]]] | None:
        """A level that is a parameter of the function around ``initialize``, which every
        call of it gives a literal (or leaves to a literal default): ``train_apex("O1")``, the
        one call of a notebook's function (the 69th review). (the levels, each call's line and
        level); None: a call gives anything else, or the function is used otherwise, or
        elsewhere on disk, or rebinds the parameter."""
        function = self.function(init)
        if not isinstance(level, cst.Name) or not isinstance(function, cst.FunctionDef):
            return None
        method = isinstance(self.parent(self.parent(function)), cst.ClassDef)
        if not method and self.parent(function) is not self.module:
            return None
        where = parameter_places(function, method)
        if level.value not in where or level.value in self.facts(function.body).assigned:
            return None
        at, param = where[level.value]
        calls = self._calls_of(function, method)
        if not calls:
            return None
        found = []
        for call in calls:
            value = given_at(self.as_given(call), level.value, at) or param.default
            if not isinstance(value, cst.SimpleString):
                return None
            found.append((self.line(call), value.evaluated_value))
        return {v for _, v in found}, found

    def _digit_choices(
        self, digit: cst.Attribute, flag: tuple[str, cst.Call] | None, init: cst.Call
    ) -> cst.BaseExpression | bool | None:
        """``f"O{args.amp_opt_level}"`` of an int flag of this file (MS-G3D, infogcn) that
        nothing assigns again: O1 where its ``choices`` are within 0/1 (``enabled=<flag> ==
        1`` where 0 is among them), or, without ``choices``, where the setting takes the level
        as O1 or O0 and the flag's default is 0 or 1 (with the setting's note). None: neither
        (the reading of a computed level decides)."""
        if flag is None or not _kept_int(flag[1], digit.attr.value, self.nodes):
            return None
        choices = _argument(flag[1], "choices", 99)
        elements = choices.elements if isinstance(choices, cst.List | cst.Tuple | cst.Set) else ()
        values = {e.value.evaluated_value for e in elements if isinstance(e.value, cst.Integer)}
        spelled = _code(self.module, digit)
        if choices is not None:
            if not (elements and len(values) == len(elements) and values <= {0, 1}):
                return None
            return True if values == {1} else cst.parse_expression(f"{spelled} == 1")
        if self.declared is None or not _open_bit(flag[1]):
            return None
        trains = _argument(init, "optimizers", 1) is not None
        self.plan.notes.append(
            f"behaviour change: opt_level `{_code(self.module, _argument(init, 'opt_level', 2))}` "
            f"comes from the int flag `{flag[0]}`, which accepts any number (no `choices`); the "
            f"setting `apex-opt-level` ({self.declared}) takes it as O1 or O0, so a run given 2 "
            f"or 3 now {'trains' if trains else 'runs'} in float32, without mixed precision (it "
            f"is on only where `{spelled}` is 1), and so does a run given a level apex raised on, "
            "without the error"
        )
        return cst.parse_expression(f"{spelled} == 1")

    def _default_everywhere(self, level: cst.CSTNode, init: cst.Call) -> bool:
        """``def setup(model, optimizer, opt_level="O1")`` whose every call in the project
        leaves ``opt_level`` out: the level is its default, O1, at each run (with a note naming
        the calls)."""
        calls = self._default_calls(level, init, "O1")
        if calls is None:
            return False
        shown = ", ".join(calls[:4]) + (", ..." if len(calls) > 4 else "")
        function = self.function(init).name.value
        self.plan.notes.append(
            f'opt_level `{_code(self.module, level)}` is "O1" at every call of `{function}` in '
            f'the project ({shown}): each leaves it to its default "O1" or passes "O1"'
        )
        return True

    def _default_calls(
        self, value: cst.CSTNode, init: cst.Call, default: str | None
    ) -> list[str] | None:
        """Where the module-level function holding ``initialize`` is called (``file:line``),
        when ``value`` is one of its parameters, with the default ``default`` (a string, or
        None for ``None``), that the function never rebinds and that every call of it in the
        project leaves out (no keyword for it, fewer positionals, no ``*args``/``**kwargs``,
        no use other than a call), or passes that very literal. None: not so."""
        function = self.function(init)
        if (
            not isinstance(value, cst.Name)
            or not isinstance(function, cst.FunctionDef)
            or not isinstance(self.parent(function), cst.Module)
            or self.path is None
        ):
            return None
        listed = [*function.params.posonly_params, *function.params.params]
        params = [*listed, *function.params.kwonly_params]
        param = next((p for p in params if p.name.value == value.value), None)
        given = param.default if param is not None else None
        if not (
            (default is None and isinstance(given, cst.Name) and given.value == "None")
            or (isinstance(given, cst.SimpleString) and given.evaluated_value == default)
        ) or any(
            isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
            and isinstance(n.target, cst.Name) and n.target.value == value.value
            for n in self._subtree(function)
        ):  # fmt: skip
            return None
        position = listed.index(param) if param in listed else 10**6  # keyword-only: none
        return calls_keep_default(self.path, function.name.value, position, value.value, default)

    def _pinned_o1(self, spelled: str, init: cst.Call) -> bool:
        """``initialize`` runs only where an ``if`` around it found the level (spelled
        ``spelled``) equal to "O1" (``if c.apex_amp_level == "O1":``, mozilla/TTS, the 66th
        review), or after an ``assert`` that did (the 68th review's l12), and nothing between
        assigns it: O1 wherever it runs."""
        inner: cst.CSTNode = init
        for above in self.ancestors(init):
            if (
                isinstance(above, cst.If)
                and self.within(inner, above.body)
                and _tests_o1(self.module, above.test, spelled)
            ):
                return not self._stored_before(above.body, spelled, init)
            if isinstance(above, cst.IndentedBlock | cst.Module):  # `assert LEVEL == "O1"`
                for statement in above.body:  # before it in a block around it (l12)
                    if self.order[id(statement)] >= self.order[id(init)]:
                        break
                    small = statement.body if isinstance(statement, cst.SimpleStatementLine) else []
                    if any(
                        isinstance(s, cst.Assert) and _tests_o1(self.module, s.test, spelled)
                        for s in small
                    ):
                        return not self._stored_before(above, spelled, init, after=statement)
            inner = above
        return False

    def _stored_before(
        self, block: cst.CSTNode, spelled: str, init: cst.Call, after: cst.CSTNode | None = None
    ) -> bool:
        """Something in ``block`` (after ``after``) assigns ``spelled`` before ``init``."""
        start = self.order[id(after)] if after is not None else -1
        return any(
            isinstance(n, cst.AssignTarget | cst.AugAssign)
            and _code(self.module, n.target) == spelled
            and start < self.order[id(n)] < self.order[id(init)]
            for n in self._subtree(block)
        )

    def _not_o1(
        self, spelled: str, origin: str, also: str, uncovered: str, counted: tuple | None = None
    ) -> str:
        """Why an opt level is refused, and the ways out that would allow the rewrite: the
        setting apex-opt-level only where it would (``uncovered``: why it would not).
        ``counted``: the int flag the level spells after its "O"."""
        text = (
            f"opt_level `{spelled}` is not provably O1: it comes from {origin}{also}; O2/O3 "
            "cast the model and keep fp32 master weights, which torch.amp cannot express, so "
            "rewriting it as O1 changes those runs"
        )
        choices = "[0, 1]" if counted else '["O0", "O1"]'
        fix = (
            f'`opt_level="O1"`, or `choices={choices}` on its flag; where every run is O0, apex '
            "is off: delete its calls instead"
        )
        setting = f"the setting `apex-opt-level` ({self.declared})"
        if self.declared is not None and also:
            return (
                f"{text}; {setting} does not cover a file that branches on O2/O3; fix the "
                f"level ({fix}) to allow the rewrite"
            )
        if self.declared is not None:
            return (
                f"{text}; {setting} does not cover it: {uncovered}; fix the level ({fix}) to "
                "allow the rewrite"
            )
        if also or uncovered:
            return f"{text}; fix the level ({fix}) to allow the rewrite"
        return f"{text}; fix the level ({fix}), or {DECLARE_LEVEL}"

    def _parameter_read(self, level: cst.CSTNode, init: cst.Call) -> cst.Param | None:
        """The parameter of the function around ``init`` that a computed ``level`` reads
        (``"O{}".format(opt_level)``), if any."""
        function = self.function(init)
        if not isinstance(function, cst.FunctionDef):
            return None
        params = {
            p.name.value: p for p in (*function.params.params, *function.params.kwonly_params)
        }
        read = [
            n.value for n in self._subtree(level) if isinstance(n, cst.Name) and self.variable(n)
        ]
        return next((params[n] for n in read if n in params), None)

    def _copies_flag(self, target: cst.CSTNode, attr: str) -> bool:
        """``self.fp16_opt_level = self.args.fp16_opt_level``: the parsed flag's value kept
        under its own name on another object (REIC's trainers), not a new level."""
        assign = self.parent(target) if isinstance(target, cst.AssignTarget) else None
        value = assign.value if isinstance(assign, cst.Assign) else None
        return (
            isinstance(value, cst.Attribute)
            and value.attr.value == attr
            and _code(self.module, value) != _code(self.module, target.target)
        )

    def _uncovered(
        self, level: cst.CSTNode, init: cst.Call, flag: tuple | None, reassigned: bool
    ) -> str:
        """Why the setting apex-opt-level cannot take ``level`` as O1 or O0 ("": it can). It
        speaks for a level the code leaves open, read as it is: not one computed here (it is
        read again for ``enabled=``), not one this file sets to O2/O3, assigns more than once
        or after ``initialize``, not a flag whose default is O2/O3 or that this file overwrites."""
        spelled = _code(self.module, level)
        if not _plain(level):
            return (
                f"`{spelled}` is computed, not read from a name, an attribute or a constant "
                "subscript (`enabled=` reads it again)"
            )
        got = _got(level)
        if got is not None and self._other_level(got.args[1].value):
            return f"its default is `{_code(self.module, got.args[1].value)}`"
        if flag is not None and reassigned:
            return "this file assigns it after parsing its flag"
        default = _argument(flag[1], "default", 99) if flag is not None else None
        if default is not None and self._other_level(default):
            return f"the default of its flag is `{_code(self.module, default)}`"
        function = self.function(init)
        # a name: its bindings in the function of `initialize` and at module level; anything
        # else (`config.level`, `cfg["level"]`): wherever this file assigns it
        scoped = isinstance(level, cst.Name)
        # `self.opt_level` in a method: only its class (and those derived from it here) can
        # store the attribute of that object; another class's `self.opt_level` is its own
        cls = self._holder(function) if isinstance(function, cst.FunctionDef) else None
        family = None
        if (
            isinstance(cls, cst.ClassDef)
            and isinstance(level, cst.Attribute)
            and isinstance(level.value, cst.Name)
            and function.params.params
            and level.value.value == function.params.params[0].name.value
        ):
            family = [cls, *self.derived({cls.name.value})]
        stores, others = [], []
        kinds = (cst.Param, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                 cst.NamedExpr, cst.Del, cst.AsName)  # fmt: skip
        for node in self.nodes:
            if not isinstance(node, kinds):
                continue
            if (scoped and self.function(node) not in (function, self.module)) or self.dead(node):
                continue
            if family is not None and not any(self.within(node, c) for c in family):
                continue
            if scoped and isinstance(  # a class body's name (a dataclass field) is its own scope
                next((a for a in self.ancestors(node)
                      if isinstance(a, cst.FunctionDef | cst.ClassDef)), None),
                cst.ClassDef,
            ):  # fmt: skip
                continue
            if isinstance(node, cst.Param):
                if scoped and node.name.value == level.value:
                    stores.append((node, node.default))
            elif isinstance(node, cst.AssignTarget | cst.AnnAssign):
                if _code(self.module, node.target) == spelled:
                    value = self.parent(node) if isinstance(node, cst.AssignTarget) else node
                    stores.append((node, value.value))
            elif isinstance(node, cst.AugAssign | cst.For | cst.NamedExpr | cst.Del):
                if spelled in {_code(self.module, n) for n in self._subtree(node.target)}:
                    others.append(node)
            elif isinstance(node, cst.AsName) and _code(self.module, node.name) == spelled:
                others.append(node)
        for store, value in stores:
            if value is not None and self._other_level(value):
                where = self.line(store)
                return f"this file sets it to `{_code(self.module, value)}` at line {where}"
        # a name of the function given a default and then, maybe, what a config says
        # (`level = "O0"`, `if "opt_level" in cfg: level = cfg["opt_level"]`): each value it
        # may hold at `initialize` is one the setting declares O1 or O0
        local = scoped and all(
            self.function(store) is function and isinstance(store, cst.AssignTarget)
            for store, _ in stores
        )
        if (len(stores) > 1 and not local) or others:
            return f"this file assigns `{spelled}` more than once"
        late = [s for s, _ in stores if self.function(s) is function
                and self.order[id(s)] > self.order[id(init)]]  # fmt: skip
        if late:
            return f"this file assigns `{spelled}` after `amp.initialize`"
        name = spelled.rpartition(".")[2].strip("[]'\"")
        declared = self.declared is not None  # (a scan of the project: only where it counts)
        found = level_elsewhere(self.path, name) if declared and self.path and name else None
        if found is not None:
            shown = os.path.relpath(found[0], os.path.dirname(os.path.abspath(self.path)))
            return f"the project sets it to O2/O3 elsewhere: `{found[2]}` ({shown}:{found[1]})"
        return ""

    def _any_level(self, comparison: cst.Comparison) -> bool:
        """``level in ("O0", "O1", "O2", "O3")``: a test that apex is used at all, which O1
        passes as O2 does (no branch on O2/O3)."""
        return (
            len(comparison.comparisons) == 1
            and isinstance(comparison.comparisons[0].operator, cst.In | cst.NotIn)
            and any(
                isinstance(n, cst.SimpleString) and n.evaluated_value == "O1"
                for n in self._subtree(comparison.comparisons[0].comparator)
            )
        )

    def _other_level(self, node: cst.CSTNode) -> bool:
        """``node`` is, or holds, the string "O2" or "O3" (a level torch.amp cannot express)."""
        return any(
            isinstance(n, cst.SimpleString) and n.evaluated_value in ("O2", "O3")
            for n in self._subtree(node)
        )

    def _read(self, name: cst.Name) -> bool:
        """``name`` is not the target of an assignment (a plain read, a call argument...)."""
        parent = self.parent(name)
        return not isinstance(
            parent,
            cst.AssignTarget | cst.AnnAssign | cst.AugAssign | cst.For | cst.Param | cst.Element
            | cst.AsName,
        )  # fmt: skip
