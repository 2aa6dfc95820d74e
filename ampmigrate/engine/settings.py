"""What a run is asked to do (``Settings``) and what it found in one file (``FileResult``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ampmigrate.catalog import Rule, Safety
from ampmigrate.findings import Diagnostic, Fix

# settings.project's key for the files project passes have analysed though the prefilter
# dropped them (by absolute path, the rule codes): see ``ProjectPass.adopt``
ADOPTED = "adopted"


@dataclass(frozen=True)
class Settings:
    rules: tuple[Rule, ...]
    fix: bool = False
    unsafe_fixes: bool = False
    target_torch: tuple[int, ...] | None = None
    target_keras: int = 3  # Keras 3 is what TensorFlow ships since 2.16
    max_file_size: int = 2_000_000  # bytes; 0: no limit
    # "O1": every run uses apex O1 or O0 where the code leaves the level open (the setting
    # apex-opt-level), and where that was declared, for the rewrite's note
    apex_opt_level: str | None = None
    apex_opt_level_from: str = ""
    ignore_noqa: bool = False  # report what suppression comments hide (Ruff's --ignore-noqa)
    # what each project pass (ampmigrate.families) found over the run, by its name; run()
    # fills it, the family that registered the pass reads it
    project: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def safety(self, fix: Fix | None) -> Safety | None:
        """A fix's grade here: one that needs a newer torch than ``target_torch`` is unsafe."""
        if fix is None:
            return None
        return "unsafe" if self.too_new(fix) else fix.safety

    def too_new(self, fix: Fix) -> bool:
        return self.target_torch is not None and self.target_torch < fix.min_torch

    def applies(self, fix: Fix | None) -> bool:
        return fix is not None and (self.safety(fix) == "safe" or self.unsafe_fixes)


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed: list[Diagnostic] = field(default_factory=list)
    suppressed: list[Diagnostic] = field(default_factory=list)  # what suppressions hide
    original: bytes | None = None  # the bytes read, for a file that passed the prefilter
    new_source: bytes | None = None
    error: str | None = None
    parsed: bool = False

    @property
    def changed(self) -> bool:
        return self.new_source is not None and self.new_source != self.original
