"""ampmigrate: lint and migrate deprecated mixed-precision (AMP) APIs."""

__version__ = "0.1.0"
