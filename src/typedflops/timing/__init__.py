"""Timed runs: ``benchmark`` and its ``Measurement`` (:mod:`.bench`), and the roofline
picture (:mod:`.plot`). Internal: ``typedflops.benchmark`` is the public name.
"""
