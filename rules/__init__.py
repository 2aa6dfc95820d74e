"""The rule catalog: one TOML file per rule, shipped inside the wheel as ``ampmigrate.rules``.

Each file carries the rule's metadata, its documentation, its examples (which are also its tests)
and, for rename rules, the symbol table the generic rename engine executes.
"""
