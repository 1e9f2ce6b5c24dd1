"""Python-backend models (each file becomes ``<model>/1/model.py`` in the repository).

They run inside Triton's python backend stub, so they import only numpy, tokenizers,
onnxruntime / openvino / paddle and the files copied beside them — never ``serving`` or ``pipeline``.
Each subclasses ``model_support.PerRequest`` or ``model_support.Batched`` (serving/triton/model_support.py: the
bundle check, parameters, siblings and the per-request loop) and keeps only what differs; ``bundle_integrity.py``
(serving/triton/integrity.py) is beside them too.
"""
