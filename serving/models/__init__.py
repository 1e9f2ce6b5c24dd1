"""Python-backend models (each file becomes ``<model>/1/model.py`` in the repository).

They run inside Triton's python backend stub, so they import only numpy, tokenizers,
onnxruntime / paddle and ``triton_python_backend_utils`` — never ``serving`` or ``pipeline``.
Shared helpers are the ``bundle_integrity.py`` copied next to them (serving/integrity.py).
"""
