"""The cost engine: what ran (a dispatch-level counter and its rules), what it would cost at
other sizes (dry runs under ``FakeTensorMode``), and formulas fitted from those dry runs.

Layers, each importing only the ones above it: :mod:`.tensors` (what an op saw),
:mod:`.rules` (the registry and the conventions), :mod:`.counter` (the torch modes that turn
ops into events), :mod:`.backward` (the backward an op's autograd runs), :mod:`.fit`
(formulas from runs at several sizes), :mod:`.dryrun` (fake runs and the probes that build
their arguments), :mod:`.session` (``record()``).
"""

# Any use of the engine attaches its counter to the contract's hook (checked calls made
# while one of its sessions counts are handed to it).
from . import hook as hook
