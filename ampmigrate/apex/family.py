"""apex O1 in a class family across modules (nnU-Net's trainers): the base class initializes amp
in one of its methods, subclasses in other modules override the training step and scale with
apex. apex's amp state was the process's; the GradScaler that replaces it is the object's,
``self.scaler``, made by the base's method where ``initialize`` was (``Scaler._scope``), and
read by every class of the family (:mod:`ampmigrate.apex.links` pairs the modules; they are
rewritten together or not at all).
"""

from __future__ import annotations

import libcst as cst

from ampmigrate.apex.common import _Setup, _statements
from ampmigrate.apex.linkbase import _listed
from ampmigrate.apex.users import derived_on_disk


class ClassFamily:
    """The subclass side of a class family's link (mixed into ``_Planner``)."""

    def _family_setup(self, calls: dict[str, list[cst.Call]]) -> _Setup | None:
        """Every class of this file derived from the family's base reads its GradScaler as
        ``self.scaler``; autocast asks it whether it is on (the base's switch, whatever it
        is). An apex call outside those classes cannot reach it."""
        base, home = self.link.family, self.link.functions[0]
        family = self.derived({base})
        if not family and self.path is not None:  # through a class of another module of the
            # family (nnUNet's grandchildren: `TrainerV2DP(TrainerV2)`, the 66th review)
            lineage = {
                c.name
                for _, _, _, classes in derived_on_disk(self.link.callers[0], base)
                for c in classes
            }
            family = self.derived({base} | lineage)
        if not family:
            self.problem(
                self.plan.anchor,
                f"no class here derives from `{base}`, whose `self.scaler` replaces apex's "
                "state: pass the GradScaler by hand",
            )
            return None
        if self.free_name("scaler") != "scaler":
            self.problem(
                self.plan.anchor,
                f"the classes derived from `{base}` here cannot read its GradScaler as "
                "`self.scaler` (the name is in use here): pass it by hand",
            )
            return None
        self.mode, self.cls, self.family, self.name = "class", family[0], family, "scaler"
        for call in (c for group in calls.values() for c in group):
            if not any(self.method_of(call, c) for c in family):
                self.problem(
                    call,
                    f"`amp` is used outside the classes derived from `{base}`, whose "
                    f"`self.scaler` replaces apex's state: pass the GradScaler by hand",
                )
        self._overrides(home, "self")
        named = _listed([f"`{c.name.value}`" for c in family])
        self.plan.notes.append(
            f"{named} read the GradScaler that `{base}.{home}` makes where `amp.initialize` was "
            f"({self.link.other(self.role)}, rewritten in the same run), as `self.scaler`"
        )
        return _Setup(_statements(family[0].body)[0], self.module, set(self.link.models), None,
                      by_scaler=True)  # fmt: skip
