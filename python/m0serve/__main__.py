"""`python -m m0serve`: the same as the `m0serve` command."""

from m0serve import main

main()
