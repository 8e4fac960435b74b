"""The mutant catalogue: planted protocol bugs the project's own tests must kill.

    python -m properties.mutants                 # every mutant: the kill matrix
    python -m properties.mutants --only NAME     # one (repeatable)
    python -m properties.mutants --list          # the catalogue
    python -m properties.mutants                 # each suite first runs unmutated (a kill counts only after it passed)

Each mutant (properties/mutants/catalogue.py) is a named, exact-text patch to impl/ applied to a
temporary copy of the repository — never a switch in production code. The runner
(properties/mutants/runner.py) runs the mutant's suite in the copy and reports which test killed it and
how long that took. The target: every mutant killed, each in under two minutes.
"""

from properties.mutants.catalogue import BY_NAME, CATALOGUE, Edit, Mutant

__all__ = ["BY_NAME", "CATALOGUE", "Edit", "Mutant"]
