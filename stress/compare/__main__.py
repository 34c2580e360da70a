"""`python -m stress.compare`: the benchmark's command line."""
import sys

from . import main

sys.exit(main())
