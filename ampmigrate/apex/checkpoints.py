"""``amp.state_dict()`` / ``load_state_dict()`` -> the scaler's, under a key of their own, in the
file and in checkpoint helpers.
"""

from __future__ import annotations

import os
import re

import libcst as cst

from ampmigrate.apex.common import _HELPER, _appended, _code, _is_call_of, _Setup, lone_call
from ampmigrate.apex.ondisk import _module_file
from ampmigrate.apex.users import key_readers_on_disk


class Checkpoints:
    """The checkpoints stage of ``_Planner`` (mixed into it)."""

    def _state(self, call: cst.Call, member: str, switched: bool = False) -> None:
        """``switched``: the GradScaler has an ``enabled=`` switch, so a checkpoint may hold
        the ``{}`` a disabled one saves."""
        access = self.access(self.function(call))
        if access is None:
            return  # _scope said why
        if member == "state_dict" and call.args:
            self.problem(call, "`amp.state_dict(destination)`: GradScaler has no destination")
            return
        holder = self.parent(call)
        if member == "state_dict" and isinstance(holder, cst.Subscript) and holder.value is call:
            self.problem(
                call,
                f"`{_code(self.module, holder)}` reads apex's own state layout, which a "
                "GradScaler's state does not have (KeyError): read the loss scale as "
                "`scaler.get_scale()` after `scaler.update()`, by hand",
            )
            return
        func = cst.parse_expression(f"{access}.{member}")
        self.plan.edits[call] = lambda u: u.with_changes(func=func)
        keyed = (
            self._rename_saved_key(call)
            if member == "state_dict"
            else self._rename_loaded_key(call)
        )
        note = (
            f'the GradScaler state is saved under "{self.name}"; checkpoints saved by apex keep '
            "apex's state under their old key: convert them with `ampmigrate convert-checkpoint "
            f"OLD NEW --store-as {self.name}`, which moves the result there"
        )
        filed = call in self.file_loads or call in self.file_saves
        if keyed and not filed:
            self.note_once(note)
        if keyed and switched and call in self.file_loads:
            arg = call.args[0]
            own = cst.parse_expression(f"{access}.state_dict()")
            self.plan.edits[arg] = lambda u: u.with_changes(
                value=cst.BooleanOperation(left=u.value, operator=cst.Or(), right=own)
            )
            note = (
                "an empty GradScaler state (a run with mixed precision off saves a disabled "
                "one's `{}`, which an enabled one refuses) loads the scaler's own instead"
            )
            self.note_once(note)
        elif keyed and switched and member == "load_state_dict":
            self._skip_empty(call)

    def _skip_empty(self, call: cst.Call) -> None:
        """``scaler.load_state_dict(ckpt["scaler"])`` alone on its line, under ``if
        ckpt["scaler"]:``: a run with mixed precision off saved a disabled GradScaler's ``{}``,
        which an enabled one refuses (RuntimeError) where apex loaded its own state."""
        statement = self.statement(call)
        if not lone_call(statement, call) or statement in self.plan.edits:
            return

        owner = self.owner(self.parent(statement))
        if (
            isinstance(owner, cst.If)
            and owner.orelse is None
            and list(owner.body.body) == [statement]
            and owner not in self.plan.edits
        ):  # `if fp16:` around it: `if fp16 and ckpt["scaler"]:`

            def joined(u: cst.If) -> cst.If:
                loaded = u.body.body[0].body[0].value.args[0].value
                test = u.test
                if isinstance(test, cst.IfExp | cst.Lambda | cst.NamedExpr) or (
                    isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or)
                ):
                    test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                return u.with_changes(
                    test=cst.BooleanOperation(left=test, operator=cst.And(), right=loaded)
                )

            self.plan.edits[owner] = joined
        else:

            def guarded(u: cst.SimpleStatementLine) -> cst.If:
                inner = u.with_changes(leading_lines=())
                return cst.If(
                    test=u.body[0].value.args[0].value,
                    body=cst.IndentedBlock(body=[inner]),
                    leading_lines=u.leading_lines,
                )

            self.plan.edits[statement] = guarded
        note = (
            "the GradScaler's state is loaded only where the checkpoint holds one: a run with "
            "mixed precision off saves a disabled GradScaler's `{}`, which an enabled one "
            "refuses (the scale then starts afresh; apex loaded its O0 state)"
        )
        self.note_once(note)

    def _resume_state(self, setup: _Setup, init: cst.Call) -> None:
        """apex's loss scale was never checkpointed here; the optimizer's is. Put the
        GradScaler's state next to it, under its own key, where the scaler exists: a dict
        literal holding ``opt.state_dict()`` gains ``"scaler": scaler.state_dict()``, and
        ``opt.load_state_dict(ckpt[...])`` is followed by a guarded ``scaler.load_state_dict``
        (old checkpoints have no such key; a disabled scaler saved ``{}``, which an enabled one
        refuses to load)."""
        args = {a.keyword.value: a.value for a in init.args if a.keyword}
        positional = [a.value for a in init.args if not a.keyword]
        optimizer = args.get("optimizers", positional[1] if len(positional) > 1 else None)
        opt = _code(self.module, optimizer)
        created = self.order[id(self.early or setup.statement)]
        done: set[cst.CSTNode] = set()
        gaps: list[str] = []  # where the scaler's state cannot join the optimizer's
        joined: list[cst.CSTNode] = []  # the edits that make it join

        def helper(function: cst.CSTNode) -> bool:
            """A module-level checkpoint helper given ``opt`` only by the function holding the
            scaler, after it exists: it can take the scaler as a parameter."""
            if self.mode != "function" or not isinstance(function, cst.FunctionDef):
                return False
            if function in self.threaded or self.within(function, setup.home):
                return function in self.threaded
            if self.top_function(function) is not function:
                return False
            for ref in self._references(function.name.value):
                call = self.parent(ref)
                if not (
                    isinstance(call, cst.Call)
                    and call.func is ref
                    and self.function(call) is setup.home
                    and self.order[id(call)] > created
                    and any(_code(self.module, a.value) == opt for a in call.args)
                ):
                    return False
            self._thread([function], setup.home)
            return True

        def reachable(node: cst.CSTNode) -> str | None:
            function = self.function(node)
            if self.access(function) is None and helper(function):
                return self.access(function)
            access = self.access(function)
            if access is None or (function is setup.home and self.order[id(node)] < created):
                return None
            return access

        for node in self.nodes:
            if _is_call_of(node, "state_dict") and _code(self.module, node.func.value) == opt:
                holder = next((a for a in self.ancestors(node) if isinstance(a, cst.Dict)), None)
                if holder is None:
                    gaps.append(
                        f"`{opt}.state_dict()` at line {self.line(node)} is not in a "
                        "checkpoint dict (a file of its own?)"
                    )
                    continue
                if holder in self.plan.edits:
                    continue
                access = reachable(node)
                keys = [e.key for e in holder.elements if isinstance(e, cst.DictElement)]
                if access is None or not all(isinstance(k, cst.SimpleString) for k in keys):
                    gaps.append(
                        f"the checkpoint dict at line {self.line(node)} (the GradScaler is not "
                        "created yet there, or not reachable, or the keys are not strings)"
                    )
                    continue
                quote = keys[0].quote
                element = cst.DictElement(
                    cst.SimpleString(f"{quote}{self.name}{quote}"),
                    cst.parse_expression(f"{access}.state_dict()"),
                )
                self.plan.edits[holder] = lambda u, e=element: u.with_changes(
                    elements=_appended(u.elements, e)
                )
                joined.append(holder)
            elif (
                _is_call_of(node, "load_state_dict") and _code(self.module, node.func.value) == opt
            ):
                statement = self.statement(node)
                source = node.args[0].value if len(node.args) == 1 else None
                access = reachable(node)
                if statement in done or (
                    statement in self.plan.edits and statement is not self.early
                ):
                    continue
                if not isinstance(source, cst.Subscript) or not isinstance(
                    source.value, cst.Name | cst.Attribute
                ):
                    gaps.append(
                        f"the restore at line {self.line(node)} (from a value that is not a "
                        "checkpoint key: a file of its own?)"
                    )
                    continue
                home = self.global_home
                if home is not None and self.function(node) is not home:
                    gaps.append(
                        f"the restore at line {self.line(node)} (in "
                        f"`{self.function(node).name.value}`, which may run before "
                        f"`{home.name.value}` creates the GradScaler)"
                    )
                    continue
                if access is None:
                    gaps.append(
                        f"the restore at line {self.line(node)} (before the GradScaler exists "
                        f"where `amp.initialize` was, line {self.line(setup.statement)}, or "
                        "where it is not reachable"
                        + (f"; it cannot be created earlier: {self.late}" if self.late else "")
                        + ")"
                    )
                    continue
                if not isinstance(statement, cst.SimpleStatementLine) or statement.body[
                    0
                ] is not self.parent(node):
                    gaps.append(f"the restore at line {self.line(node)} (inside an expression)")
                    continue
                container = _code(self.module, source.value)
                quote = '"'
                load = cst.parse_statement(
                    f"if {quote}{self.name}{quote} in {container} and "
                    f"{container}[{quote}{self.name}{quote}]:\n"
                    f"    {access}.load_state_dict({container}[{quote}{self.name}{quote}])\n"
                )
                done.add(statement)
                previous = self.plan.edits.get(statement)  # the early scaler line before it
                self.plan.edits[statement] = lambda u, load=load, p=previous: cst.FlattenSentinel(
                    [*(p(u).nodes if p else [u]), load]
                )
                joined.append(statement)
                self.plan.notes.append(
                    f"the GradScaler's state is restored after `{opt}`'s (line "
                    f"{self.line(statement)}) when the checkpoint has it"
                )
        saves = [n for n in self.nodes if _is_call_of(n, "save")]
        if joined and saves and not gaps and not any(isinstance(j, cst.Dict) for j in joined):
            # restored, and this file's checkpoints save no optimizer (Tweet's trainer: a
            # model-only `torch.save`, an optimizer restore for other checkpoints): a scaler
            # restore would read a key its saves never write (AMP208 on the result); apex's
            # scale restarted on resume, and so it does
            gaps.append(
                f"`{opt}`'s state is restored here, and the checkpoint saved at line "
                f"{self.line(saves[0])} does not hold it"
            )
        if not joined and not gaps:
            # no optimizer state saved or restored here: a checkpoint (if any) of the model
            # alone left apex's scale out too; AMP208 on the result is that gap (see verify)
            self.scale_gap = True
        if gaps:
            # apex never checkpointed its loss scale here: leaving the GradScaler's out is
            # exactly what apex did (the scale restarts on resume); AMP208 reports that gap
            for node in joined:
                if node is self.early:
                    previous = self.plan.edits[node]
                    self.plan.edits[node] = lambda u, p=previous: cst.FlattenSentinel(
                        p(u).nodes[:-1]
                    )
                else:
                    del self.plan.edits[node]
            self.plan.notes = [
                n for n in self.plan.notes if "GradScaler's state is restored" not in n
            ]
            self.plan.notes.append(
                "apex never checkpointed its loss scale here and the GradScaler's state is "
                f"not added beside `{opt}`'s either ({'; '.join(gaps)}): the scale restarts "
                "on resume, as it did under apex (AMP208 reports this gap on its own)"
            )
            self.scale_gap = True

    def _new_key(self, node: cst.SimpleString) -> None:
        quote = node.quote
        self.plan.edits[node] = lambda _u: cst.SimpleString(f"{quote}{self.name}{quote}")

    def _rename_saved_key(self, call: cst.Call) -> bool:
        """The key ``amp.state_dict()`` is stored under becomes the scaler's; its value may
        flow there through a conditional (``"amp": amp.state_dict() if fp16 else None``).
        False: it is not stored under a key here (noted)."""
        value, parent = call, self.parent(call)
        while isinstance(parent, cst.IfExp) and value is not parent.test:
            value, parent = parent, self.parent(parent)
        if isinstance(parent, cst.DictElement) and isinstance(parent.key, cst.SimpleString):
            self._new_key(parent.key)
            return True
        if isinstance(parent, cst.Arg) and parent.keyword is not None:
            holder = self.parent(parent)
            if isinstance(holder, cst.Call) and _code(self.module, holder.func) == "dict":
                self.plan.edits[parent.keyword] = lambda _u: cst.Name(self.name)
                return True
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
            index = self._key_of(target)
            if index is not None:
                self._new_key(index)
                return True
            if isinstance(target, cst.Name) and self._rename_keys_of(target.value, call):
                return True
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            holder = self.parent(parent)
            if (
                isinstance(holder, cst.Call)
                and "torch.save" in self.qualified(holder.func)
                and len(holder.args) >= 2
                and holder.args[0] is parent
                and self._rename_file(holder.args[1].value, saved=True)
            ):
                self.file_saves.append(call)
                return True
        self.unkeyed.append(call)
        self.plan.notes.append(
            f"`amp.state_dict()` at line {self.line(call)} is not stored under a key: make "
            "sure apex-format state is never fed to `scaler.load_state_dict`"
        )
        return False

    def _rename_keys_of(self, name: str, call: cst.Call) -> bool:
        """``state = amp.state_dict()`` then ``{"amp": state}`` (or ``ckpt["amp"] = state``,
        ``dict(amp=state)``) in the same function: the keys it is stored under become the
        scaler's. False: it is stored under no key there."""
        keys: list[cst.CSTNode] = []
        for node in self._subtree(self.function(call)):
            if not isinstance(node, cst.Name) or node.value != name:
                continue
            parent = self.parent(node)
            if (
                isinstance(parent, cst.DictElement)
                and parent.value is node
                and isinstance(parent.key, cst.SimpleString)
            ):
                keys.append(parent.key)
            elif isinstance(parent, cst.Assign) and parent.value is node:
                index = self._key_of(parent.targets[0].target)
                if index is not None:
                    keys.append(index)
            elif isinstance(parent, cst.Arg) and parent.keyword is not None:
                holder = self.parent(parent)
                if isinstance(holder, cst.Call) and _code(self.module, holder.func) == "dict":
                    self.plan.edits[parent.keyword] = lambda _u: cst.Name(self.name)
                    keys.append(parent.keyword)
        for key in keys:
            if isinstance(key, cst.SimpleString):
                self._new_key(key)
        return bool(keys)

    def _rename_file(self, path: cst.BaseExpression, saved: bool) -> bool:
        """A state saved to a file of its own (``os.path.join(output_dir, "amp.pt")``, beside
        ``optimizer.pt``): the one string of the path whose file name starts with ``amp``
        becomes the scaler's (``scaler.pt``), so that apex's old file is never fed to the
        GradScaler. False: no such string."""
        strings = [n for n in self._subtree(path) if isinstance(n, cst.SimpleString)]
        if len(strings) != 1 or not isinstance(strings[0].evaluated_value, str):
            return False
        value = strings[0].evaluated_value
        folder, _, name = value.rpartition("/")
        if not name.startswith("amp") or name[3:4].isalnum():
            return False  # (`amplitude.pt` is not apex's)
        renamed = f"{folder}/{self.name}{name[3:]}" if folder else f"{self.name}{name[3:]}"
        quote = strings[0].quote
        self.plan.edits[strings[0]] = lambda _u: cst.SimpleString(f"{quote}{renamed}{quote}")
        self.state_files.setdefault(value, set()).add("saved" if saved else "loaded")
        note = (
            f"the GradScaler's state is saved to `{renamed}` instead of `{value}`: an apex "
            f"checkpoint keeps apex's state in `{value}`; convert it with `ampmigrate "
            f"convert-checkpoint {name} {renamed.rpartition('/')[2]}` to resume from it"
        )
        self.note_once(note)
        return True

    def _keys_left_behind(self) -> None:
        """A checkpoint key the rewrite renames for its save or load, read or written
        elsewhere under the old name from a checkpoint (the same container, or
        ``torch.load(...)`` itself): LayoutDIT copies ``torch.load(path)["amp"]`` into the
        resume dict as ``ckpt["amp"]``, which the load it feeds now reads as ``ckpt["scaler"]``
        (the thirty-sixth review). Save and load would disagree: refused, the line named."""
        renamed = {
            id(n): n for n in self.nodes if isinstance(n, cst.SimpleString) and n in self.plan.edits
        }
        old = {n.evaluated_value for n in renamed.values()}
        containers = {
            _code(self.module, holder.value)
            for n in renamed.values()
            if isinstance(holder := self._subscript_of(n), cst.Subscript)
        }
        for node in self.nodes:
            holder = self._subscript_of(node) if isinstance(node, cst.SimpleString) else None
            if holder is None or id(node) in renamed or node.evaluated_value not in old:
                continue
            loaded = isinstance(holder.value, cst.Call) and "torch.load" in self.qualified(
                holder.value.func
            )
            if loaded or _code(self.module, holder.value) in containers:
                self.problem(
                    node,
                    f"the checkpoint key {node.value} is read or written here too, where the "
                    f"rewrite does not rename it with the save and load it moves to "
                    f'"{self.name}": save and load would disagree; rename it by hand',
                )
                return
        if not old or self.path is None:
            return
        readers = key_readers_on_disk(self.path, {k for k in old if isinstance(k, str)})
        if readers:  # (the 82nd review's b07: `resume.py` read `ckpt["amp"]`: KeyError)
            other, line, key = readers[0]
            shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
            first = next(n for n in renamed.values() if n.evaluated_value == key)
            self.problem(
                first,
                f'the rewrite moves the checkpoint key "{key}" to "{self.name}" here, and '
                f"{shown}:{line} reads it under the old name (a file the rewrite does not "
                "change): it would find nothing there; rename it there too, by hand",
            )

    def _subscript_of(self, node: cst.CSTNode) -> cst.Subscript | None:
        """The subscript ``x["amp"]`` whose only index is ``node``."""
        index = self.parent(node)
        element = self.parent(index) if isinstance(index, cst.Index) else None
        holder = self.parent(element) if isinstance(element, cst.SubscriptElement) else None
        return (
            holder if isinstance(holder, cst.Subscript) and self._key_of(holder) is node else None
        )

    def _key_of(self, node: cst.CSTNode) -> cst.SimpleString | None:
        """The string of ``x["amp"]`` or ``x.get("amp")``."""
        if isinstance(node, cst.Subscript) and len(node.slice) == 1:
            index = node.slice[0].slice
            if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
                return index.value
        if (
            _is_call_of(node, "get")
            and node.args
            and isinstance(node.args[0].value, cst.SimpleString)
        ):
            return node.args[0].value
        return None

    def _rename_loaded_key(self, call: cst.Call) -> bool:
        """The key apex's state is loaded from becomes the scaler's, and so does every other
        read of that key from the same checkpoint in the function (``"amp" in ckpt``,
        ``ckpt["amp"] is not None``, ``ckpt.get("amp")``): one left behind would test or read
        a key that new checkpoints do not have."""
        source = call.args[0].value if len(call.args) == 1 else None
        key = self._key_of(source) if source is not None else None
        if (
            key is None
            and isinstance(source, cst.Call)
            and "torch.load" in self.qualified(source.func)
            and source.args
            and self._rename_file(source.args[0].value, saved=False)
        ):
            self.file_loads.append(call)
            return True
        if key is None:
            self.problem(
                call,
                "`amp.load_state_dict` of a value not read from a checkpoint key here: load "
                f'the GradScaler from its own key (`checkpoint["{self.name}"]`), never from '
                "apex's old entry (convert old checkpoints with `ampmigrate convert-checkpoint`)",
            )
            return False
        self._new_key(key)
        self.renamed_loads.append(call)
        container = _code(self.module, source.value if isinstance(source, cst.Subscript)
                          else source.func.value)  # fmt: skip
        old = key.evaluated_value
        spellings = (container, f"{container}.keys()")  # `"amp" in ckpt`, `... in ckpt.keys()`
        left = []  # other mentions of the key in the function, not renamed
        for node in self._subtree(self.function(call)):
            if not isinstance(node, cst.SimpleString) or node.evaluated_value != old:
                continue
            if node is key or node in self.plan.edits:
                continue
            parent = self.parent(node)
            reader = None
            if isinstance(parent, cst.Index):  # Index -> SubscriptElement -> Subscript
                reader = self.parent(self.parent(parent))
            elif isinstance(parent, cst.Arg):
                reader = self.parent(parent)
            if reader is not None and self._key_of(reader) is node:
                of = reader.value if isinstance(reader, cst.Subscript) else reader.func.value
                if _code(self.module, of) == container:
                    self._new_key(node)
                    continue
            elif (
                isinstance(parent, cst.Comparison)
                and parent.left is node
                and len(parent.comparisons) == 1
                and isinstance(parent.comparisons[0].operator, cst.In | cst.NotIn)
                and _code(self.module, parent.comparisons[0].comparator) in spellings
            ):
                self._new_key(node)
                continue
            if container in _code(self.module, self.statement(node)):
                left.append(node)
        if left:  # a test of the old key left behind would never see the new one
            self.problem(
                left[0],
                f"the checkpoint key {left[0].value} is read here in a form the rewrite does "
                f"not rename with the load at line {self.line(call)} (a test left on the old "
                "key never sees the scaler's): rename it by hand",
            )
        return True

    def _helper_notes(self) -> None:
        """Checkpoint helpers imported from sibling modules are not visible here."""
        imported: dict[str, str] = {}
        for node in self.nodes:
            if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
                module = "." * len(node.relative) + (
                    _code(self.module, node.module) if node.module else ""
                )
                if module.split(".")[0] in _NOT_THE_PROJECT:
                    continue  # (a library's `ModelCheckpoint` never sees this project's amp)
                for alias in node.names:
                    imported[alias.evaluated_alias or alias.evaluated_name] = module
        handed = {id(h.call) for h in self.handed}  # given the GradScaler already
        for name, module in imported.items():
            if not _HELPER.search(name):
                continue
            dots = len(module) - len(module.lstrip("."))
            found = _module_file(self.path, dots, module[dots:]) if self.path else None
            if self.path is not None and "checkpoint" not in name.lower() and found is None:
                continue  # a library's `save_image`: it never sees this project's amp state
            if found is not None and not _mentions_amp(found):
                continue  # on disk, and nothing in it names amp: it keeps no amp state
            if found is not None and self.link and os.path.abspath(found) in self.link.files:
                continue  # rewritten with this file, given the GradScaler by the link
            for ref in self._references(name):
                call = self.parent(ref)
                reached = isinstance(call, cst.Call) and call.func is ref
                reached = reached and id(call) not in handed
                if reached and self.access(self.function(call)) is not None:
                    self.plan.notes.append(
                        f"`{module}.{name}` (called at line {self.line(call)}) is in another "
                        "module: if it saves or loads apex amp state, give it a "
                        f"`{self.name}` parameter, pass `{self.name}={self.name}` here and "
                        f'use the key "{self.name}"'
                    )
                    break


# packages whose helpers (ignite's `ModelCheckpoint`, Lightning's callbacks) are a library's
_NOT_THE_PROJECT = frozenset({
    "torch", "apex", "numpy", "os", "typing", "ignite", "pytorch_lightning", "lightning",
    "transformers", "mmcv", "mmengine", "detectron2", "fairseq", "timm", "accelerate",
    "deepspeed", "allennlp", "torchvision", "tensorboardX", "wandb",
})  # fmt: skip


def _mentions_amp(path: str) -> bool:
    """The module's text names amp at all (apex's, or a handle passed in as ``amp``): a word
    that starts with it, not ``clamp`` or ``sample``."""
    try:
        with open(path, "rb") as handle:
            return re.search(rb"\bamp", handle.read()) is not None
    except OSError:
        return True
