"""Shared core of the RCEA reproduction harness: configuration, artifact store, verifier, data, seeds, provenance.

Imports nothing heavy at module level: the aggregation role (no torch) imports this package too.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
