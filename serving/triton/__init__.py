"""What runs inside Triton's python backend: copied into every bundle, never imported from there as ``serving``.

``models/*.py`` each become a ``<model>/1/model.py``; beside them go ``model_support.py`` (the set-up and the
per-request loop every model shares), ``bundle_integrity.py`` (``integrity.py``), and as a model needs them
``text_input.py``, ``class_outputs.py``, ``entity_outputs.py``, ``mrc_requests.py``, ``uie_requests.py``,
``fastdeploy_payloads.py`` and the pipeline's pure modules.  Standard library, numpy, tokenizers and the engines only: neither ``serving`` nor
``pipeline`` is installed in Triton (tests/test_imports.py checks every import, those inside functions too).  The
launcher and the tools import ``integrity`` and ``text_input`` from here.
"""
