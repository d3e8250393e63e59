"""The cost model: what a call costs (:mod:`.types`: ``Cost``, ``OpCost``, ``Term``),
counted by the engine (:mod:`.engine`: rules, the counting mode, dry runs, fitted
formulas, records). Internal: ``typedflops.Cost``, ``Term``, ``record`` and
``register_rule`` are the public names.
"""
