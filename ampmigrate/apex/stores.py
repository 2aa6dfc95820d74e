"""apex's module kept on an object (`self.amp = amp`, `args.amp = amp`) and the calls made
through it: the GradScaler is stored the same way, where the object gets its optimizer, and
the calls through the attribute become its; refused where another file reads the attribute
or the object is not the one the rewrite follows."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator

import libcst as cst

from ampmigrate.apex.casts import (
    _read,
)
from ampmigrate.apex.common import (
    _code,
    _Setup,
    _statements,
)
from ampmigrate.apex.ondisk import _project_files, project_folder
from ampmigrate.apex.users import users_on_disk
from ampmigrate.apex.verdict import (
    SUPPORTED,
)


class Stores:
    """Mixed into ``_Planner`` after ``Handles``."""

    @functools.cached_property
    def _stores(self) -> dict[str, list[cst.Call]]:
        """``args.amp = amp``: apex's module kept on an object, by where it is kept, with the
        calls this file makes through it (``args.amp.scale_loss(...)``); read once, as the
        module does not change while it is planned."""
        stores: dict[str, list[cst.Call]] = {}
        for node in self.nodes:
            if (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Attribute)
                and isinstance(node.value, cst.Name | cst.Attribute)
                and "apex.amp" in self.qualified(node.value)
            ):
                stores[_code(self.module, node.targets[0].target)] = []
        for node in self.nodes:
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                calls = stores.get(_code(self.module, node.func.value))
                if calls is not None:
                    calls.append(node)
        return stores

    def _through_stores(self, setup: _Setup, calls: dict[str, list[cst.Call]]) -> set[cst.Call]:
        """``args.amp = amp`` after ``initialize`` and ``args.amp.scale_loss(...)`` in the file:
        the GradScaler takes the module's place as the value kept there (``args.scaler =
        scaler``, right after it is made, so it is there on both paths as the disabled scaler
        is), and each call through it becomes the scaler's. Only where every function that
        calls through it has the object as a parameter that every call in the file fills with
        that same object after the store. The calls now planned; a store that cannot be
        followed keeps its blocker."""
        planned: set[cst.Call] = set()
        for where, node in self.kept.items():
            why = self._kept_why(setup, where, node)
            if why is not None:
                self.problem(node, self._stored(node, where, why))
                continue
            root = where.partition(".")[0]
            statement = self.statement(node)
            self.plan.edits[statement] = lambda _u: cst.RemoveFromParent()
            self.after_scaler.append(f"{root}.{self.name} = {self.name}")
            through = self._stores.get(where, [])
            for call in (c for c in through if c not in self.initialize_calls):
                member = call.func.attr.value
                calls.setdefault(member, []).append(call)
                planned.add(call)
                function = self.function(call)
                if function is not setup.home and not self.within(function, setup.home):
                    self.stored_access[id(function)] = f"{root}.{self.name}"
            callers = (
                "the other methods reach it through their `self`"
                if self._instance_store(setup, root) is not None
                else f"callers in other files must give `{root}` the same way"
            )
            self.plan.notes.append(
                f"`{where} = amp` becomes `{root}.{self.name} = {self.name}`, made where the "
                f"GradScaler is (both paths have it); the calls through `{where}` become its "
                f"({callers})"
            )
        self.followed |= planned
        return planned

    def _kept_read_elsewhere(self, attribute: str) -> tuple[str, int] | None:
        """Another file of the project that calls apex through ``<object>.<attribute>``
        (``t.amp.scale_loss(...)`` in an engine that receives the trainer) and imports no apex
        itself (a sibling script keeping apex's module on its own `args` is its own process's):
        (it as shown, the line); None where none does."""
        members = "|".join(sorted(SUPPORTED))
        pattern = re.compile(rf"\.{re.escape(attribute)}\.(?:{members})\(".encode())
        for shown, data in self._other_files():
            found = pattern.search(data)
            if found is not None and not re.search(rb"^\s*(from apex\b|import apex\b)", data, re.M):
                return shown, data.count(b"\n", 0, found.start()) + 1
        return None
        here = os.path.abspath(self.path)
        pattern = re.compile(
            rf"\.{re.escape(attribute)}\.(?:scale_loss|master_params|state_dict|"
            rf"load_state_dict|initialize)\(".encode()
        )
        for file in _project_files(self.path) or []:
            if os.path.abspath(file) == here:
                continue
            data = _read(file)
            found = pattern.search(data)
            if found is not None and not re.search(rb"^\s*(from apex\b|import apex\b)", data, re.M):
                shown = os.path.relpath(file, os.path.dirname(here))
                return shown, data.count(b"\n", 0, found.start()) + 1
        return None

    def _other_files(self) -> Iterator[tuple[str, bytes]]:
        """The project's other files on disk, as shown from this one, with their bytes."""
        if self.path is None:
            return
        here = os.path.abspath(self.path)
        for file in _project_files(self.path) or []:
            if os.path.abspath(file) != here:
                yield os.path.relpath(file, os.path.dirname(here)), _read(file)

    def _cleared(self, target: cst.Attribute) -> bool:
        """``target`` is stored None (``self.amp = None``, or a place of ``self.model,
        self.amp = [None, None]``, RetinaNet's reset in ``__init__``): no apex call could go
        through that value, so it is no read of the module kept there."""
        holder = self.parent(target)
        value = None
        if isinstance(holder, cst.AssignTarget):
            value = self.parent(holder).value
        elif isinstance(holder, cst.Element):
            sequence = self.parent(holder)
            outer = self.parent(sequence)
            assign = self.parent(outer) if isinstance(outer, cst.AssignTarget) else None
            given = assign.value if isinstance(assign, cst.Assign) else None
            if isinstance(given, cst.List | cst.Tuple) and len(given.elements) == len(
                sequence.elements
            ):
                value = given.elements[list(sequence.elements).index(holder)].value
        return isinstance(value, cst.Name) and value.value == "None"

    def _kept_why(self, setup: _Setup, where: str, node: cst.CSTNode) -> str | None:
        """Why the scaler cannot take the place of apex's module kept at ``where`` (None: it
        can)."""
        root, _, attribute = where.partition(".")
        statement = self.statement(node)
        init = setup.statement
        if "." in attribute or not root.isidentifier():
            return f"only `name.attribute` is followed, not `{where}`"
        if self.early is not None:
            return "the GradScaler is made before the optimizer's restore, where it may not exist"
        if self.parent(statement) is not self.parent(init):
            return "it is not kept in the block of `amp.initialize`"
        # kept before `initialize` too: apex raised on any use but `initialize` before it
        # (its amp state was not set up), so the GradScaler made there takes its place
        block = _statements(self.parent(statement)) or []
        first, last = sorted((block.index(init), block.index(statement)))
        if any(root in self.facts(s).assigned for s in block[first + 1 : last]):
            return f"`{root}` is bound again between `amp.initialize` and it"
        through = [c for c in self._stores.get(where, []) if c not in self.initialize_calls]
        linked = self.link is not None and self.link.kept == attribute and not self.link.broken
        if not through and not linked:
            other = next(
                (n for n in self.nodes if isinstance(n, cst.Call)
                 and isinstance(n.func, cst.Attribute)
                 and isinstance(n.func.value, cst.Attribute)
                 and n.func.value.attr.value == attribute
                 and _code(self.module, n.func.value) != where),
                None,
            )  # fmt: skip
            if other is not None:  # (argus: a helper keeps it on the model, whose class calls
                spelled = _code(self.module, other.func.value)  # through `self.amp`)
                return (
                    f"the calls through `.{attribute}` in this file are made on another "
                    f"spelling (`{spelled}` at line {self.line(other)}), which this rewrite "
                    "does not follow to it"
                )
            return "nothing in this file calls through it, and code outside this file may"
        members = {c.func.attr.value for c in through}
        if members - (SUPPORTED - {"initialize"}):
            listed = ", ".join(f"`{m}`" for m in sorted(members - SUPPORTED))
            return f"it is used for {listed or '`initialize`'}, which has no GradScaler form here"
        funcs = {id(c.func.value) for c in self._stores.get(where, [])}
        for other in self.nodes:
            if (
                isinstance(other, cst.Attribute)
                and other.attr.value == self.name
                and _code(self.module, other.value) == root
            ):
                return f"`{root}.{self.name}` is already used in this file"
            if (
                isinstance(other, cst.Attribute)
                and other.attr.value == attribute
                and _code(self.module, other) == where
                and id(other) not in funcs
                and not (
                    isinstance(self.parent(other), cst.AssignTarget)
                    and self.statement(other) is statement
                )
                and not self._cleared(other)
            ):
                return f"`{where}` is read at line {self.line(other)} other than to call apex"
            if (
                isinstance(other, cst.SimpleString)
                and other.evaluated_value == attribute
                and isinstance(self.parent(other), cst.Arg)
            ):
                return f"`{where}` may be read by name at line {self.line(other)}"
        other = None if linked else self._kept_read_elsewhere(attribute)
        if other is not None:  # (the 46th review: a partial migration there raised)
            return (
                f"{other[0]} calls apex through `.{attribute}` at its line {other[1]}, on the "
                "object it is kept on, and would not find it there once it holds the GradScaler"
            )
        users = {id(self.function(c)) for c in through}
        if not linked and self.path is not None:
            names = [f.name.value for f in self.module.body if isinstance(f, cst.FunctionDef)
                     and id(f) in users]  # fmt: skip
            outside = users_on_disk(self.path, names) if names else []
            if outside is None:
                return "there are too many files around it to find who calls its functions"
            if outside:
                other, line, name = outside[0]
                shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
                return (
                    f"`{name}` is also used at {shown}:{line}, which must give it `{root}` with "
                    "the GradScaler: rewrite them in one run"
                )
        cls = self._instance_store(setup, root)
        for call in through:
            function = self.function(call)
            if function is setup.home or self.within(function, setup.home):
                if self.order[id(call)] < self.order[id(statement)]:
                    return f"it is called through at line {self.line(call)} before it is kept"
                continue
            if cls is not None:
                method = self.method_of(call, cls)
                if (
                    method is None
                    or method.params.params[:1] == []
                    or (method.params.params[0].name.value != root)
                ):
                    return (
                        f"`{where}` is read at line {self.line(call)} outside the methods of "
                        f"`{cls.name.value}`"
                    )
                continue
            why = self._carries(function, root, setup, statement, users)
            if why is not None:
                return why
        return None

    def _instance_store(self, setup: _Setup, root: str) -> cst.ClassDef | None:
        """The class whose method holds ``initialize`` when ``root`` is that method's first
        parameter (``self.amp = amp``): its other methods reach the store through their own
        ``self`` (None: not such a store)."""
        home = setup.home
        cls = self.parent(self.parent(home)) if isinstance(home, cst.FunctionDef) else None
        if (
            isinstance(cls, cst.ClassDef)
            and home.params.params
            and home.params.params[0].name.value == root
        ):
            return cls
        return None

    def _carries(self, function, root: str, setup: _Setup, store, users: set[int]) -> str | None:
        """Why ``function`` may see another ``root`` than the one the store filled (None: each
        call in the file passes that one, after the store or from a function that does)."""
        if not isinstance(function, cst.FunctionDef):
            return f"`{root}.amp` is called through at module level"
        params = [p.name.value for p in function.params.params]
        if root not in params or root in self.facts(function.body).assigned:
            return f"`{function.name.value}` does not take `{root}` as a parameter"
        holder = self.parent(self.parent(function))
        method = isinstance(holder, cst.ClassDef)
        index = params.index(root) - (1 if method else 0)
        name = function.name.value
        found = 0
        for node in self.nodes:
            if not isinstance(node, cst.Name) or node.value != name or node is function.name:
                continue
            parent = self.parent(node)
            if method:
                if not (isinstance(parent, cst.Attribute) and parent.attr is node):
                    continue
                call, func = self.parent(parent), parent
            else:
                if isinstance(parent, cst.Attribute) and parent.attr is node:
                    continue
                call, func = parent, node
            if not (isinstance(call, cst.Call) and call.func is func):
                return f"`{name}` is used at line {self.line(node)} other than by a call"
            positional = [a.value for a in call.args if not a.keyword and not a.star]
            keywords = {a.keyword.value for a in call.args if a.keyword}
            if (
                method
                and len(positional) <= index
                and root not in keywords
                and not any(a.star for a in call.args)
            ):
                continue  # it cannot bind `root`: another class's method of that name
            given = {a.keyword.value: a.value for a in call.args if a.keyword}.get(
                root, positional[index] if 0 <= index < len(positional) else None
            )
            if not (isinstance(given, cst.Name) and given.value == root):
                return f"`{name}` is called at line {self.line(call)} without `{root}`"
            caller = self.function(call)
            if caller is setup.home:
                if self.order[id(call)] < self.order[id(store)]:
                    return f"`{name}` is called at line {self.line(call)} before the store"
            elif id(caller) not in users:
                return (
                    f"`{name}` is called at line {self.line(call)} from a function that is not "
                    f"given `{root}` by the store"
                )
            found += 1
        if not found:
            return f"`{name}` is not called in this file"
        return None

    def _function_name(self, function: cst.CSTNode) -> str:
        """``train``, ``Trainer.__init__`` (a method, with its class), or module-level code."""
        if not isinstance(function, cst.FunctionDef):
            return "module-level code"
        holder = self._holder(function)
        prefix = f"{holder.name.value}." if isinstance(holder, cst.ClassDef) else ""
        return prefix + function.name.value

    def _stored(self, node: cst.CSTNode, where: str, why: str | None = None) -> str:
        """The blocker for ``where = amp``: what is called through it, why the GradScaler
        cannot take its place (``why``; None: this file does not initialize amp once), and
        what that looks like by hand."""
        calls = self._stores.get(where, [])
        listed = ", ".join(
            f"`{_code(self.module, c.func)}` at line {self.line(c)}" for c in calls[:4]
        )
        through = f" and called through it ({listed})" if calls else ""
        because = why or "this file does not initialize amp exactly once"
        scaler = where.rsplit(".", 1)[0] + ".scaler"
        return (
            f"`{_code(self.module, node)}` is kept as `{where}`{through}: the GradScaler cannot "
            f"take its place there, as {because}; put it there by hand (`{scaler} = scaler`, "
            f"`{scaler}.scale(loss).backward()`, `{scaler}.step(optimizer)` + "
            f"`{scaler}.update()`, `{scaler}.state_dict()`)"
        )

    def _outside_base(self, init: cst.Call) -> str | None:
        """The blocker where ``initialize`` sits under a test of a ``self`` attribute that
        this file never sets, in a class whose base comes from an installed package (a
        subclass of transformers' ``Trainer``, whose ``use_apex`` the base sets and under
        which it scales the loss): None where that is not so."""
        klass = next((a for a in self.ancestors(init) if isinstance(a, cst.ClassDef)), None)
        if klass is None or self.path is None:
            return None
        tested = set(self._apex_flags(init))
        stored = {
            t.target.attr.value
            for t in self.nodes
            if isinstance(t, cst.AssignTarget) and isinstance(t.target, cst.Attribute)
        }
        # (a mixed-precision switch: `self.training` is nn.Module's mode, no backend choice)
        unset = sorted(n for n in tested - stored if re.search(r"apex|amp|fp16|half", n))
        folder = project_folder(self.path)
        for base in klass.bases:
            names = [q for q in self.qualified(base.value) if "." in q]
            top = names[0].partition(".")[0] if names else None
            if (
                not unset
                or top is None
                or any(os.path.exists(os.path.join(folder, top + end)) for end in ("", ".py"))
            ):
                continue
            hint = (
                " (transformers' `Trainer` does, in `training_step`: choose its native backend, "
                '`fp16_backend="amp"`)'
                if top == "transformers"
                else ""
            )
            return (
                f"no `amp.scale_loss` in this file: `{klass.name.value}` subclasses "
                f"`{names[0]}`, which is not in the run, and `self.{unset[0]}`, the test around "
                "`amp.initialize`, is never set in this file (the base class sets it, or code "
                "that holds the object): the base class may choose apex and scale the loss "
                f"under it itself{hint}, which the rewrite cannot change; choose "
                "the base class's native path, then delete the apex branches here, by hand"
            )
        return None
