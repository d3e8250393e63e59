"""A small package for the import-hook tests: annotated code that never imports the hook.

``tests/tools/test_import_hook.py`` imports it with and without
``typedflops.tools.import_hook.install_import_hook("sample_pkg")``; nothing here is decorated by
hand except :func:`sample_pkg.functions.already_decorated`.
"""
