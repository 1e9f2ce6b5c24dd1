"""Python-backend models (each file becomes ``<model>/1/model.py`` in the repository).

They run inside Triton's python backend stub, so they import only numpy, tokenizers,
onnxruntime / paddle and ``triton_python_backend_utils`` — never ``serving`` or ``pipeline``.
Shared helpers are copied next to them: ``model_support.py`` (serving/model_support.py: sibling loading,
the bundle check, parameters) and ``bundle_integrity.py`` (serving/integrity.py).
"""
