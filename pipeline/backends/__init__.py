"""The engines: one folder per runtime, each split by concern the same way (``convert``, ``quantize``, ``session``).

    onnxruntime/   ONNX Runtime (the CPU bundle's default engine; CUDA and TensorRT providers on a GPU)
    openvino/      OpenVINO (the second CPU engine, chosen by measurement)
    paddle/        Paddle Inference (``compress.candidate_format: paddle``; its TensorRT subgraph engine on a GPU)
    registry.py    the one table of runtimes the stages measure and ship (names, forms, openers, availability)
    forms.py       the files one engine writes and another reads (the Paddle inference program)

No engine folder imports another (``tests/test_imports.py``); what they share lives in ``forms``, the registry and
the engine-neutral INT8 package ``pipeline.quantization``.
"""
