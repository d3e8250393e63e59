"""What users run: the ``typedflops`` command (:mod:`.cli`), the pytest plugin
(:mod:`.pytest_plugin`) and the import hook that checks a whole package (:mod:`.import_hook`).
"""
