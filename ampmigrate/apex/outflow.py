"""The initialized model leaving the function that initializes: ``train`` returns it and its
caller tests it (maskrcnn-benchmark's ``model = train(cfg, ...)``, then ``run_test(cfg,
model)``). apex O1 patched torch for the whole process from ``initialize`` on, so that test ran
in float16; the rewrite's regions are in ``train``: stated, naming where the model goes.
"""

from __future__ import annotations

import libcst as cst

from ampmigrate.apex.common import _code, _Setup


class Outflow:
    """The returned-model stage of ``_Planner`` (mixed into it)."""

    def _returned_model(self, setup: _Setup, models: set[str], keep: str) -> None:
        home = setup.home
        if not isinstance(home, cst.FunctionDef) or self.parent(home) is not self.module:
            return
        returned = [
            n
            for n in self._subtree(home.body)
            if isinstance(n, cst.Return)
            and n.value is not None
            and self.function(n) is home
            and any(isinstance(v, cst.Name) and v.value in models for v in self._subtree(n.value))
        ]
        if not returned:
            return
        # (a function that scales runs its forwards in its regions: 58a's `train(model, ...)`
        # after `model, opt = setup(model, opt)` ran in float16 and still does)
        scaling = {f.name.value for _, _, f, _ in self.requests if isinstance(f, cst.FunctionDef)}
        uses = []
        for ref in self._references(home.name.value):
            call = self.parent(ref)
            assign = self.parent(call) if isinstance(call, cst.Call) else None
            if not (isinstance(assign, cst.Assign) and assign.value is call):
                continue
            bound = {
                n.value
                for t in assign.targets
                for n in self._subtree(t.target)
                if isinstance(n, cst.Name)
            }
            caller = self.function(call)
            uses += [
                (caller, use)
                for use in self._subtree(caller)
                if isinstance(use, cst.Call)
                and self.order.get(id(use), -1) > self.order[id(call)]
                and not any(id(a) in self.wrapped for a in self.ancestors(use))
                and not (isinstance(use.func, cst.Name) and use.func.value in scaling)
                and any(
                    isinstance(v, cst.Name) and v.value in bound
                    for v in [use.func, *(a.value for a in use.args)]
                )
            ]
        if not uses:
            return
        listed = ", ".join(f"`{_code(self.module, u.func)}(...)` (line {self.line(u)})"
                           for _, u in uses[:3])  # fmt: skip
        where = uses[0][0]
        caller = where.name.value if isinstance(where, cst.FunctionDef) else "module-level code"
        self.plan.notes.append(
            f"behaviour change: `{home.name.value}` returns the initialized model (line "
            f"{self.line(returned[0])}) and {caller} then hands it to {listed}: apex O1 cast "
            "every forward in the process from `initialize` on, so where it was on, a forward "
            f"there (a test after training) ran in float16 and runs in float32 now: {keep}"
        )
