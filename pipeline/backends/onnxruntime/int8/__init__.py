"""Accuracy-aware, batch-independent INT8 for ONNX Runtime (the form the CPU bundle ships by default).

* ``stats``      per-channel activation ranges of every weight MatMul input, from an FP32 run (real tokens only)
* ``smoothing``  SmoothQuant-style migration of activation outliers into the weights
* ``fusion``     the fused ops ORT cannot find itself in a fixed-scale graph (``MatMulIntegerToFloat``, K^T)
* ``recipe``     one named INT8 recipe -> one ONNX file (static, batch-independent activation scales), and its
                 TensorRT (QDQ) form
* ``search``     the recipe searches as this engine runs them: ``pipeline.quantization.search.Search`` with
                 ``recipe.build`` / ``recipe.build_qdq`` and ONNX Runtime sessions

What a recipe is and how recipes are searched (sensitivity per MatMul, greedy mixed precision until the
accuracy budget is met) are engine-neutral: ``pipeline.quantization``.
"""
