"""The apex API outside ``apex.amp`` (AMP311-AMP315): optimizers, normalization, parallel.

``table`` says what each apex name becomes in torch (or what projects use instead where torch
has nothing), ``plan`` resolves the references of a file and plans the rewrites.
"""

from ampmigrate.apex.api.plan import check

__all__ = ["check"]
