"""Subcommands of the ``robustlab`` CLI, one module each (see :mod:`robustlab.cli`)."""
