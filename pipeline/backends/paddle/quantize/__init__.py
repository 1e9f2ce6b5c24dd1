"""INT8 for Paddle Inference, replacing the PaddleSlim entry points that fail on the pinned Paddle (DEVELOPERS.md):

* ``ptq``         post-training quantization of a static program, with a grid over its settings
* ``qat``         quantization-aware training (paddleslim dygraph QAT) of a dygraph model, saved as a static program
* ``embeddings``  the word-embedding table of a static program stored int8 (``paddleslim.quant.quant_embedding``
                  segfaults)

Each writes a Paddle inference program (``pipeline.backends.forms``) that ``session`` runs with oneDNN's int8
kernels.  These are not what the CPU bundle ships: paddle2onnx keeps a PTQ program's weights float, so ONNX
Runtime's INT8 is built from the FP32 ONNX instead (``pipeline.backends.onnxruntime.int8``).
"""
