"""What runs inside Triton's python backend: copied into every bundle, never imported from there as ``serving``.

What every kind's python models share: ``models/runner.py`` (the model step's runner, a ``<task>_model/1/model.py``),
and beside every python model ``model_support.py`` (the set-up and the per-request loop every model shares),
``bundle_integrity.py`` (``integrity.py``), and as a model needs them ``text_input.py``, ``fastdeploy_payloads.py``
and the pipeline's pure modules.  A kind's own python models and helpers are in ``serving/kinds/<kind>/models/``,
under the same rules.  Standard library, numpy, tokenizers and the engines only: neither ``serving`` nor
``pipeline`` is installed in Triton (tests/test_imports.py checks every import, those inside functions too).  The
launcher and the tools import ``integrity`` and ``text_input`` from here.
"""
