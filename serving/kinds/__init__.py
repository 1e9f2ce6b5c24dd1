"""One folder per task kind (``pipeline.contract.TaskKind``): everything serving knows of that kind, so a new kind is
this folder plus its pipeline module (DEVELOPERS.md, "Adding a task kind").

    <kind>/bundle.py   KIND, a ``serving.bundle.kinds.BundleKind``: what its bundle is made of (python models and the
                       pure modules copied beside them, label and meta.json checks, its Triton configs, model card
                       lines, FastDeploy's example); imported like serving/bundle (never its tools.py)
    <kind>/tools.py    KIND, a ``serving.tools.kinds.ToolKind``: its smoke run, offline answers, perf input, how the
                       client prints its answers; imported like serving/tools
    <kind>/models/     its python models and their helpers, copied into bundles and run by Triton's python backend:
                       they import what serving/triton's do (tests/test_imports.py checks both)

``serving.bundle.kinds.bundle_kind`` and ``serving.tools.kinds.tool_kind`` find a kind's object as the ``KIND`` of its
``bundle.py`` / ``tools.py`` (``pipeline.contract.kind_table``): no table names the kinds.
"""
