"""Compression: DynaBERT width pruning (``dynabert``), then every candidate of a strategy built, scored on dev and
timed in the runtime that ships (``build``, ``onnx_candidates``, ``candidates``), and PaddleNLP's compression API
(``arguments``, ``api``).  The quantizers live with their engines: ``pipeline.backends.<engine>.quantize`` (Paddle's
PTQ/QAT/int8 embeddings, OpenVINO's NNCF), ONNX Runtime's recipe form in ``pipeline.backends.onnxruntime.int8``,
the engine-neutral recipe search in ``pipeline.quantization``."""
