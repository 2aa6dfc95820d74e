"""apex's state as module state across files: a module-level function initializes amp and
returns the models (DPR's ``setup_for_distributed_mode``), the files that import it scale the
loss with what it returns. apex's loss scale belonged to the process, not to an object either
side holds, so the GradScaler becomes the function's module state (``_global_scaler``) and the
importers read it there, as ``<module>.scaler``. The pre-pass (``links._shared_links``) pairs
the files; each side plans its half here."""

from __future__ import annotations

import libcst as cst

from ampmigrate.apex.common import _code, _Setup


class SharedState:
    """The shared-module-state stage of ``_Planner`` (mixed into it)."""

    def _sharing(self) -> bool:
        return bool(self.link and self.link.shared)

    def _shared_owner(self, setup: _Setup) -> None:
        """The function's side: the GradScaler is module state, under the name the
        importers read."""
        self._global_scaler(setup)
        if self.name != "scaler":
            self.problem(
                setup.statement,
                f"the GradScaler would be `{self.name}` here (`scaler` is in use), while the "
                f"importers ({self.link.other('callee')}) read `scaler`: migrate them by hand",
            )
            return
        several = len(self.link.callers) > 1
        self.plan.notes.append(
            f"{self.link.other('callee')} import{'' if several else 's'} "
            f"`{self.link.functions[0]}` and read{'' if several else 's'} this module's "
            f"`scaler` (the same run rewrites {'them' if several else 'it'})"
        )

    def _shared_setup(self) -> _Setup | None:
        """An importer's side: ``import <module>`` beside its from-import of the function;
        the models are what its calls of the function bind at the places the function's
        tuple returns them; every use of apex reads ``<module>.scaler``."""
        module, function = self.link.spellings[0][0], self.link.functions[0]
        root = module.split(".")[0]
        statement = next(
            (
                s
                for s in self.module.body
                if isinstance(s, cst.SimpleStatementLine)
                and any(
                    isinstance(i, cst.ImportFrom)
                    and i.module is not None
                    and not i.relative
                    and _code(self.module, i.module) == module
                    for i in s.body
                )
            ),
            None,
        )
        clash = any(  # (`nn.utils.clip_grad_norm_` reads an attribute, not the name)
            isinstance(n, cst.Name)
            and n.value == root
            and not (isinstance(p := self.parent(n), cst.Attribute) and p.attr is n)
            and not (isinstance(p, cst.Arg) and p.keyword is n)
            and not any(isinstance(a, cst.Import | cst.ImportFrom) for a in self.ancestors(n))
            for n in self.nodes
        )
        if statement is None or clash:
            why = (
                f"`{root}` is in use here"
                if clash
                else f"`{function}` is not imported from `{module}` at module level"
            )
            self.problem(
                self.plan.anchor,
                f"this file would read the GradScaler as `{module}.scaler`, but {why}: pass "
                "it by hand",
            )
            return None
        calls = [
            n for n in self.nodes
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == function
        ]  # fmt: skip
        models = self.bound_at(calls, self.link.shared)
        if not calls or not models:
            self.problem(
                self.plan.anchor,
                f"no call of `{function}` here binds the models it returns: pass the "
                "GradScaler by hand",
            )
            return None
        self.mode, self.name = "module", f"{module}.scaler"
        added = cst.parse_statement(f"import {module}\n")
        self.plan.edits[statement] = lambda u: cst.FlattenSentinel([u, added])
        self.plan.notes.append(
            f"apex's loss scale was the process's: the GradScaler is module state of "
            f"{self.link.other('caller')}, made where `{function}` initialized amp, and read "
            f"here as `{module}.scaler` (`import {module}` added)"
        )
        return _Setup(self.statement(calls[0]), self.module, models, None, by_scaler=True)
