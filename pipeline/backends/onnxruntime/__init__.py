"""ONNX Runtime: the CPU engine the bundle ships by default (and, on a GPU, its CUDA and TensorRT execution providers).

One folder, one module per concern (as ``pipeline.backends.openvino``):

    convert.py    Paddle static -> clean FP32 ONNX (paddle2onnx and its clean-ups), ORT's BERT fusions, loading and
                  checking ONNX files against the model contract (``input_ids``/``token_type_ids`` -> ``logits``)
    quantize.py   ONNX Runtime's own INT8 forms: ``quantize_int8_dynamic``, the TensorRT QDQ form
                  ``quantize_int8_qdq``, the ``quantize_anchor`` one-liner; int8 embedding tables; weight stats
    session.py    CPU sessions; the CUDA and TensorRT execution providers
    int8/         the batch-independent INT8 form the CPU bundle ships: activation ranges, SmoothQuant, recipe build,
                  the fused ops ORT does not find itself, and this engine's recipe searches (``pipeline.quantization``)
"""
