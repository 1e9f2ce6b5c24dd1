"""Paddle Inference: the runtime of ``compress.candidate_format: paddle`` (Paddle serving and the Python API), and the
program every ONNX form is converted from.

One folder, one module per concern (as ``pipeline.backends.openvino``):

    convert.py    dygraph ERNIE -> Paddle inference program (``export_static``), its output renamed ``logits``
    quantize/     PaddleSlim-based INT8 of a program that works on the pinned Paddle: post-training quantization with
                  its grid (``ptq``), quantization-aware training (``qat``), int8 word embeddings (``embeddings``)
    session.py    CPU sessions (oneDNN, int8 where a program carries scales); the TensorRT subgraph engine on a GPU

The program's files (``model.pdmodel`` + ``model.pdiparams``) are defined in ``pipeline.backends.forms``: ONNX
Runtime's converter reads them too.
"""
