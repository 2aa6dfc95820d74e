"""The apex families: the amp O1 rewrite (AMP30x) and the rest of apex (AMP31x, :mod:`.api`).

The engine runs :mod:`.check` (per file, and the pairing pass over :mod:`.links`); files that
``ast`` can refuse get :mod:`.verdict` (which holds the blocker texts); the others go to the libcst
planner (:mod:`.planner`), a class composed of one mixin per stage module: :mod:`.facts`,
:mod:`.handles`, :mod:`.guards`, :mod:`.initialize`, :mod:`.scaler`, :mod:`.step`, :mod:`.unscale`,
:mod:`.clip`, :mod:`.checkpoints`, :mod:`.regions` (shared pieces in :mod:`.common`), and
:mod:`.gates`, :mod:`.flow`, :mod:`.infer`. Nothing is imported here: the check module must load
without libcst.
"""
