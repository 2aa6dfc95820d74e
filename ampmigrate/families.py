"""The registry of rule families and project passes: the one table a new family adds to.

The engine runs rules without knowing any family: it asks this table which module's
``check(tree, source, names, rules, settings)`` runs a rule, and which project passes (work over
every file of the run: pairing modules, naming helper modules) to run before and after the
files are analysed. Modules are named, not imported, so that importing the engine (or this
table) loads no family; each is imported when a file first needs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ampmigrate.catalog import Rule


@dataclass(frozen=True)
class Family:
    """A module whose ``check`` runs the rules ``claims`` accepts (the first family that claims
    a rule runs it)."""

    module: str
    claims: Callable[[Rule], bool]

    @property
    def name(self) -> str:
        return self.module.rpartition(".")[2]


@dataclass(frozen=True)
class ProjectPass:
    """Work over the whole run for the rules ``codes``, when more than one file is checked.

    ``prepare(settings, candidates, paths) -> settings`` runs before the files are analysed (its
    result reaches every worker through ``Settings.project[name]``); ``settle(settings,
    candidates, results, rerun)``, if any, runs after, and may analyse files again with
    ``rerun(items, settings)`` (both sides of a pair rewritten or neither). ``adopt(data) ->
    {path: codes}``, if any: files of the run that the prefilter dropped and that those rules
    must analyse all the same (a function that receives apex's module from another file).
    ``dependency_files``: it reads the files that declare requirements (discovery then finds
    them; a run of one such file needs it too).
    """

    name: str
    codes: frozenset[str]
    module: str
    prepare: str
    settle: str | None = None
    adopt: str | None = None
    dependency_files: bool = False

    def function(self, attribute: str) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), attribute)


FAMILIES: tuple[Family, ...] = (
    Family("ampmigrate.renames", lambda rule: bool(rule.symbols)),
    Family("ampmigrate.keras", lambda rule: bool(rule.paths) or rule.code.startswith("AMP4")),
    Family("ampmigrate.apex.check", lambda rule: rule.check == "apex-o1-rewrite"),
    Family("ampmigrate.apex.api", lambda rule: rule.check == "apex-api"),
    Family("ampmigrate.requirements", lambda rule: rule.check == "apex-requirement"),
    Family("ampmigrate.checks", lambda rule: rule.check == "backward-in-autocast"),
    Family("ampmigrate.scalerflow", lambda rule: True),
)

PROJECT_PASSES: tuple[ProjectPass, ...] = (
    ProjectPass(
        name="checkpoint_helpers",
        codes=frozenset({"AMP208"}),
        module="ampmigrate.projectpasses",
        prepare="checkpoint_helpers",
    ),
    ProjectPass(
        name="class_values",
        codes=frozenset({"AMP101", "AMP102", "AMP201"}),  # the rules that rename a class
        module="ampmigrate.projectpasses",
        prepare="class_values",
    ),
    ProjectPass(
        name="apex_links",
        codes=frozenset({"AMP303"}),
        module="ampmigrate.apex.check",
        prepare="link_pairs",
        settle="settle_pairs",
    ),
    ProjectPass(
        name="apex_handed",
        codes=frozenset({"AMP303"}),
        module="ampmigrate.apex.handedout",
        prepare="prepare",
        adopt="adopt",
    ),
    ProjectPass(  # after apex_links: its settle decides which files are rewritten
        name="apex_reexports",
        codes=frozenset({"AMP303"}),
        module="ampmigrate.apex.reexport",
        prepare="prepare",
        settle="settle",
    ),
    ProjectPass(
        name="apex_requirements",
        codes=frozenset({"AMP316"}),
        module="ampmigrate.requirements",
        prepare="prepare",
        settle="settle",
        dependency_files=True,
    ),
)


def reads_dependency_files(codes: set[str]) -> bool:
    """Whether a run of the rules ``codes`` needs the files that declare requirements."""
    return any(p.dependency_files and p.codes & codes for p in PROJECT_PASSES)


def family(rule: Rule) -> Family:
    """The family that runs ``rule``."""
    return next(f for f in FAMILIES if f.claims(rule))
