"""specsim's pure model: specs, pass costs, acceptance, trees and sweeps. numpy and simpy only; no I/O."""


class SpecsimError(ValueError):
    """A user-facing error: bad input, with a message that says what is wrong and how to fix it."""


__version__ = "0.1.0"
