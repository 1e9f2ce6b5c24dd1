"""Accuracy-aware, batch-independent INT8 for ONNX Runtime (the runtime the CPU bundle ships).

* ``stats``      per-channel activation ranges of every weight MatMul input, from an FP32 run
* ``smoothing``  SmoothQuant-style migration of activation outliers into the weights
* ``recipe``     one named INT8 recipe -> one ONNX file (static, batch-independent activation scales)
* ``search``     sensitivity per MatMul and greedy mixed precision until the accuracy budget is met
"""
