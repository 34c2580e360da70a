"""The help formatter of the repository's command lines (`python -m stress`,
`python -m stress.compare`, `python -m stress.compare.mpi`)."""
from __future__ import annotations

import argparse


class HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help, unless the help already states its
    default or there is none to state: a flag, or a default of None (the option's absence
    means what its help explains)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or action.nargs == 0 or action.default is None
                or action.default is argparse.SUPPRESS or "default" in text.lower()):
            return text
        return text + " (default: %(default)s)"
