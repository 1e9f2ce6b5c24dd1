"""The python-backend model every kind shares: ``runner.py``, the model step (``<task>_model/1/model.py``; a fused
model loads it as ``runner.py``).  A kind's own python models are in ``serving/kinds/<kind>/models/``.

They run inside Triton's python backend stub, so they import only numpy, tokenizers,
onnxruntime / openvino / paddle and the files copied beside them — never ``serving`` or ``pipeline``.
Each subclasses ``model_support.PerRequest`` or ``model_support.Batched`` (serving/triton/model_support.py: the
bundle check, parameters, siblings and the per-request loop) and keeps only what differs; ``bundle_integrity.py``
(serving/triton/integrity.py) is beside them too.
"""
