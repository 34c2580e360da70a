"""`python -m stress.compare`: the benchmark's command line."""
import sys

from .cli import main

sys.exit(main())
