"""Mutation testing: deliberate bugs applied to a copy of the package, one at a time, and the
tests that catch them (`python -m tests.mutation --help`)."""

from .mutations import MUTATIONS, Mutation

__all__ = ["MUTATIONS", "Mutation"]
