"""A helper that scales the loss and the callers that step (the transformers 2.x Trainer's
``_training_step``, whose ``train`` loop clips ``amp.master_params`` and steps): apex's scaled
backward ends inside the helper, the step is its caller's, so the caller's ``opt.step()``
becomes ``scaler.step`` + ``update()`` and the helper's call is the caller's scaled backward.
The helper may sit in another module of the run (``Link.delegated``: a utilities module's
``loss_backward(loss, optimizer)``): each side plans its half, the helper its
``scaler.scale(loss).backward()``, the callers their steps and their forwards' regions.
"""

from __future__ import annotations

import libcst as cst

from ampmigrate.apex.common import _code, _Setup, given_at, is_path, lone_call
from ampmigrate.apex.switches import _holds


class Delegate:
    """The caller-steps stage of ``_Planner`` (mixed into it)."""

    def _caller_steps(self, opt: str, helper: cst.CSTNode, depth: int) -> bool:
        """Every call of ``helper`` in this file sits in a function that steps the optimizer
        the helper scales with (passed as an argument, or the same ``self`` attribute): those
        steps are planned, each call recorded as that function's scaled backward. False
        (nothing planned) where one call cannot be followed: the helper is referenced other
        than by a call, a call passes something else, or its function has no such step."""
        sites = self._call_sites(helper) if depth < 3 else None
        if not sites or any(isinstance(n, cst.Yield) for n in self._subtree(helper)):
            return False
        followed = []
        for call, caller in sites:
            if self._scales_not(helper, call):
                continue  # (no scaled backward through this call: no step to follow)
            spelled = self._spelled_at(helper, call, caller, opt)
            access = self.access(caller)
            if spelled is None or access is None:
                return False
            followed.append((self.statement(call), caller, spelled, access))
        for _, caller, spelled, access in followed:
            if not self._find_steps(spelled, access, caller, depth + 1):
                return False
        for statement, caller, spelled, _ in followed:
            self.scaled.setdefault((id(caller), spelled), []).append(statement)
            self.delegates[statement] = (helper, opt)
        return True

    def _scales_not(self, helper: cst.CSTNode, call: cst.Call) -> bool:
        """Every ``amp.scale_loss`` of ``helper`` sits under ``if <parameter>:``, and ``call``
        gives that parameter a literal False (or leaves its False default): the call never
        reaches a scaled backward (inferno's validation, ``apply_model_and_loss(...,
        backward=False)``: the 78th review, refused as a caller that does not step)."""
        if not isinstance(helper, cst.FunctionDef):
            return False
        scales = [
            n for n in self._subtree(helper.body)
            if isinstance(n, cst.Call)
            and any(q.endswith("amp.scale_loss") for q in self.qualified(n.func))
        ]  # fmt: skip
        tests = set()
        for scale in scales:
            test = None
            for above in self.ancestors(scale):
                if above is helper:
                    break
                if (
                    isinstance(above, cst.If)
                    and isinstance(above.test, cst.Name)
                    and self.within(scale, above.body)
                ):
                    test = above.test.value
            if test is None:
                return False
            tests.add(test)
        if len(tests) != 1:
            return False
        (name,) = tests
        params = list(helper.params.params)
        if isinstance(self._holder(helper), cst.ClassDef):
            params = params[1:]
        names = [p.name.value for p in params]
        if name not in names or name in self.facts(helper.body).assigned:
            return False
        param = params[names.index(name)]
        given = None
        positional = [a for a in self.given_args(call) if a.keyword is None]
        if any(a.star for a in self.given_args(call)):
            return False
        for arg in self.given_args(call):
            if arg.keyword is not None and arg.keyword.value == name:
                given = arg.value
        if given is None and names.index(name) < len(positional):
            given = positional[names.index(name)].value
        if given is None:
            given = param.default
        return isinstance(given, cst.Name) and given.value == "False"

    def _stepped_elsewhere(self, function: cst.CSTNode) -> bool:
        """``function`` is the linked helper whose callers, in other files, step."""
        return (
            self.delegating("callee")
            and isinstance(function, cst.FunctionDef)
            and function.name.value == self.link.trains
            and self.parent(function) is self.module
        )

    def _linked_backwards(self, setup: _Setup, calls: list[cst.Call]) -> None:
        """The calls of the linked helper (another file's, ``Link.delegated``) that this file
        passes the GradScaler: each is a scaled backward of the optimizer it is given, stepped
        here; its loss argument's forward gets its region here; each term of the helper's
        tests is given what holds wherever the scaler is on (the helper takes them as on)."""
        found = self.link.delegated
        helper = self.link.trains
        defaults = dict(found.defaults)
        for call in (c for c in calls if _code(self.module, c.func) in self.link.backs[0]):
            function = self.function(call)
            statement = self.statement(call)
            access = self.access(function)
            if not lone_call(statement, call) or any(a.star for a in call.args):
                self.problem(
                    call,
                    f"`{helper}(...)` ({self.link.other(self.role)}) scales a backward, and this "
                    "call is not a statement of its own with plain arguments: the rewrite "
                    "steps after it through `scaler.step`; migrate by hand",
                )
                continue
            loss, optimizer = (given_at(call, *found.loss), given_at(call, *found.optimizer))
            if loss is None or not is_path(optimizer) or access is None:
                self.problem(
                    call,
                    f"`{helper}(...)` ({self.link.other(self.role)}) scales the loss it is given "
                    "for the optimizer it is given, and this call gives "
                    + ("no loss" if loss is None else "an optimizer that is not a name or "
                       "attribute the rewrite can follow to its step")
                    + ": migrate by hand",
                )  # fmt: skip
                continue
            opt = _code(self.module, optimizer)
            on = self._in_scope(function, self._switch_terms(setup, access), setup)
            enabled = f"{access}.is_enabled()"
            for term, param, at in found.switch:
                given = given_at(call, param, at)
                shown = _code(self.module, given) if given else defaults.get(param)
                spelled = shown + term[len(param) :] if shown else None
                if spelled != "True" and not (spelled and _holds(spelled, on)):  # (True holds)
                    shown_on = sorted(t for t in on if "__name__" not in t and t != enabled)
                    self.problem(
                        call,
                        f"`{helper}(...)` ({self.link.other(self.role)}) tests `{term}`, "
                        + (f"here `{spelled}`" if spelled else "left to a default it lacks here")
                        + ", which is not known to hold wherever the GradScaler is on ("
                        + (
                            f"its switch here: {' and '.join(f'`{t}`' for t in shown_on)}"
                            if shown_on
                            else "nothing here is known to be its switch"
                        )
                        + "): where it does not, the helper's unscaled backward would be "
                        "stepped through the scaler; give it that switch, or migrate by hand",
                    )
            self.scaled.setdefault((id(function), opt), []).append(statement)
            self.delegates[statement] = (helper, opt)
            if not self._find_steps(opt, access, function, 1):
                self.problem(
                    call,
                    f"no `{opt}.step()` after `{helper}(...)` ({self.link.other(self.role)}), "
                    "which scales the loss and leaves the step to its caller, in this function "
                    "nor in every function of this file that calls it: scaled gradients must "
                    "be stepped through `scaler.step`",
                )
            self.requests.append(
                (statement, loss, function, self._enabled_at(setup, function, statement))
            )
        self.plan.notes.append(
            f"`{helper}` ({self.link.other(self.role)}) scales the loss and leaves the step to "
            "its callers: each call here is a scaled backward, its step `scaler.step` + "
            "`scaler.update()`, its forward under autocast"
        )

    def _calls_helper(self, call: cst.Call, helper: cst.FunctionDef | str) -> bool:
        """``call`` calls ``helper`` (another module's, by a spelling the pre-pass found)."""
        spelled = _code(self.module, call.func)
        if isinstance(helper, str):
            return spelled in self.link.backs[0]
        bound = self.through_partial.get(id(call))
        return (_code(self.module, bound.args[0].value) if bound else spelled) == helper.name.value

    def _backs_every_path(self, helper: cst.FunctionDef | str, opt: str) -> bool:
        """A call of ``helper`` surely backpropagates: a statement of its body does on every
        path (a ``raise`` leaves it for the caller's step too, a ``return`` before it does
        not)."""
        if isinstance(helper, str):  # (another module's, read by the pre-pass)
            return self.link.delegated.surely
        withs = self.scaled.get((id(helper), opt), [])
        if not isinstance(helper.body, cst.IndentedBlock):
            return False
        for statement in helper.body.body:
            if self._surely_backward(statement, withs, (cst.Raise,)):
                return True
            if any(isinstance(n, cst.Return) for n in self._subtree(statement)):
                return False
        return False

    def _call_sites(self, helper: cst.CSTNode) -> list[tuple[cst.Call, cst.CSTNode]] | None:
        """The calls of ``helper`` in this file and the function each sits in; None when its
        name is read otherwise (passed as a value, called on another object, or a method
        called from outside its class)."""
        if not isinstance(helper, cst.FunctionDef) or helper.decorators:
            return None
        name = helper.name.value
        holder = self._holder(helper)
        outer = self._enclosing(helper)  # a closure: its name is its function's local
        sites = []
        for node in self._subtree(outer) if outer is not None else self.nodes:
            if isinstance(node, cst.Name) and node.value == name:
                parent = self.parent(node)
                if parent is helper or (isinstance(parent, cst.Attribute) and parent.attr is node):
                    continue
                reference = node
            elif isinstance(node, cst.Attribute) and node.attr.value == name:
                reference = node
                if name == "backward" and not self._on_own_instance(node):
                    continue  # a tensor's `loss.backward()`, not the method `backward`
            else:
                continue
            call = self.parent(reference)
            if not isinstance(call, cst.Call) or call.func is not reference:
                aliased = self._partial_calls(reference) if isinstance(holder, cst.Module) else None
                if aliased is None:
                    return None
                sites += [(c, self.function(c)) for c in aliased]
                continue
            caller = self.function(call)
            if caller is helper or not isinstance(caller, cst.FunctionDef | cst.Module):
                return None
            if isinstance(holder, cst.ClassDef):
                method = self.method_of(call, holder)
                params = method.params.params if method is not None else ()
                first = params[0].name.value if params else None
                if not (
                    method is caller
                    and isinstance(reference, cst.Attribute)
                    and isinstance(reference.value, cst.Name)
                    and reference.value.value == first
                ):
                    return None
            elif outer is not None:
                # its function, or a closure of that function beside it (dialogue-generation's
                # `train_step` calling `backward(loss)`, the 75th review); deeper: not followed
                sibling = isinstance(caller, cst.FunctionDef) and (
                    not isinstance(self._holder(caller), cst.ClassDef)
                    and self._enclosing(caller) is outer
                )
                if not (caller is outer or sibling) or not isinstance(reference, cst.Name):
                    return None
            elif holder is not self.module or not isinstance(reference, cst.Name):
                return None
            sites.append((call, caller))
        return sites

    def _partial_calls(self, reference: cst.CSTNode) -> list[cst.Call] | None:
        """The calls of ``alias`` where ``reference`` is bound by ``alias =
        functools.partial(<reference>, ...)`` in a function (denoising-diffusion's
        ``backwards = partial(loss_backwards, self.fp16)``, the 66th review): each is a call of
        the helper with the partial's arguments first. None where the alias is read otherwise
        than called, bound again, or the partial's arguments are starred."""
        arg = self.parent(reference)
        bound = self.parent(arg) if isinstance(arg, cst.Arg) else None
        assign = self.parent(bound) if isinstance(bound, cst.Call) else None
        function = self.function(bound) if assign is not None else None
        if not (
            isinstance(assign, cst.Assign)
            and isinstance(function, cst.FunctionDef)
            and bound.args[0] is arg
            and arg.keyword is None
            and not any(a.star for a in bound.args)
            and "functools.partial" in self.qualified(bound.func)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
        ):
            return None
        alias = assign.targets[0].target
        calls = []
        for node in self._subtree(function.body):
            if not (isinstance(node, cst.Name) and node.value == alias.value) or node is alias:
                continue
            call = self.parent(node)
            if not (isinstance(call, cst.Call) and call.func is node):
                return None  # (read as a value, bound again, or a parameter of a nested def)
            if self.function(call) is not function or any(a.star for a in call.args):
                return None
            calls.append(call)
        for call in calls:
            self.through_partial[id(call)] = bound
        return calls

    def calls_through(self, reference: cst.CSTNode) -> list[cst.Call] | None:
        """The calls a read of a function's name makes of it: the call it is the callee of,
        or the calls of a local ``functools.partial`` alias of it; None: read otherwise."""
        call = self.parent(reference)
        if isinstance(call, cst.Call) and call.func is reference:
            return [call]
        return self._partial_calls(reference)

    def given_args(self, call: cst.Call) -> list[cst.Arg]:
        """The arguments ``call`` gives its function: a call through a ``functools.partial``
        alias gives the partial's own first."""
        bound = self.through_partial.get(id(call))
        if bound is None:
            return list(call.args)
        given = [*bound.args[1:], *call.args]  # (positional ones first: `partial(f, fp16=x)`)
        return [a for a in given if a.keyword is None] + [a for a in given if a.keyword]

    def as_given(self, call: cst.Call) -> cst.Call:
        """``call`` with the arguments its function is given (see ``given_args``)."""
        bound = self.through_partial.get(id(call))
        return call if bound is None else call.with_changes(args=self.given_args(call))

    def _on_own_instance(self, reference: cst.Attribute) -> bool:
        """``self.<name>`` in a method: read on the instance the method is given first (not a
        function's first parameter: a closure's ``loss_tensor.backward()`` is a tensor's)."""
        method = self.function(reference)
        params = method.params.params if isinstance(method, cst.FunctionDef) else ()
        return (
            bool(params)
            and isinstance(self._holder(method), cst.ClassDef)
            and isinstance(reference.value, cst.Name)
            and reference.value.value == params[0].name.value
        )

    def _spelled_at(self, helper: cst.FunctionDef, call: cst.Call, caller, opt: str) -> str | None:
        """How ``opt`` (the helper's spelling of the optimizer) reads in ``caller`` at ``call``:
        the argument given for that parameter (a name or attribute), or ``self.x`` through the
        same instance; None otherwise (a default, a global, a starred argument)."""
        params = [p.name.value for p in (*helper.params.posonly_params, *helper.params.params)]
        head, dot, rest = opt.partition(".")
        if isinstance(self._holder(helper), cst.ClassDef):
            own, params = params[0] if params else None, params[1:]
            if head == own and dot:
                return f"{_code(self.module, call.func.value)}.{rest}"
        args = self.given_args(call)
        if any(a.star for a in args):
            return None
        given = {
            arg.keyword.value if arg.keyword else params[index] if index < len(params) else None: (
                arg.value
            )
            for index, arg in enumerate(args)
        }
        rebound = head in self.facts(helper.body).assigned
        outer = self._enclosing(helper)
        sibling = (  # a closure beside it that reads the same binding of the function's
            outer is not None
            and isinstance(caller, cst.FunctionDef)
            and self._enclosing(caller) is outer
            and head not in {p.name.value for p in caller.params.params}
            and head not in self.facts(caller.body).assigned
        )
        if (
            (caller is outer or sibling)
            and head not in params
            and not rebound
            and not any(isinstance(n, cst.Global) for n in self._subtree(helper))
        ):
            return opt  # a closure reads its function's binding, as the call does
        if head not in params and self._global_in(head, helper) and self._global_in(head, caller):
            return opt  # the module's optimizer, read by both (`global optimizer` or no local)
        value = None if rebound else given.get(head)
        if not is_path(value):
            return None
        return _code(self.module, value) + dot + rest

    def _global_in(self, name: str, function: cst.CSTNode) -> bool:
        """``name`` read in ``function`` is the module's: the module itself, or a function
        that declares it ``global`` or neither binds it nor takes it as a parameter."""
        if function is self.module:
            return True
        if not isinstance(function, cst.FunctionDef) or function not in self.module.body:
            return False
        declared = any(
            isinstance(n, cst.Global) and name in {g.name.value for g in n.names}
            for n in self._subtree(function)
        )
        params = function.params
        taken = {
            p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)
        }
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                taken.add(star.name.value)
        bound = name in self.facts(function.body).assigned
        return declared or (name not in taken and not bound)

    def _enclosing(self, helper: cst.FunctionDef) -> cst.FunctionDef | None:
        """The function ``helper`` is defined in (None: a module's function or a method)."""
        if isinstance(self._holder(helper), cst.ClassDef):
            return None
        outer = self.function(self.parent(helper))
        return outer if isinstance(outer, cst.FunctionDef) else None

    def _holder(self, helper: cst.FunctionDef) -> cst.CSTNode | None:
        """The class or module whose body holds ``helper`` (a function in a function: its
        block's owner)."""
        container = self.parent(helper)
        return self.parent(container) if isinstance(container, cst.IndentedBlock) else container
