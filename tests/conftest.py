"""Make the package importable when pytest runs from a source checkout, and the one
bitwise comparison the tests use (`from conftest import assert_bitwise`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def assert_bitwise(want, got, what="gradient"):
    """Each array in `got` has the dtype, shape and bytes of the one at the same place
    in `want` (None where `want` has None), and there are as many. Bytes, not values:
    +0.0 and -0.0, or NaNs with different payloads, differ. It is the stress harness's
    comparison (`stress.checks.diff`)."""
    from stress.checks import diff_all  # on use: importing conftest imports no package

    problems = diff_all(want, got, what)
    assert not problems, "\n".join(problems)
