"""Op families, one module each; every op is a `primitive` with its rules beside it."""
