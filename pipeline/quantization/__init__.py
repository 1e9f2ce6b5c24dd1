"""INT8 that no engine owns: what a recipe varies, the held-out recipe search, and what every engine's search is
given.  Both CPU engines use it, each with its own builder; it imports no engine.

    recipe.py   ``Int8Recipe`` (SmoothQuant strength, 7-bit weights, MatMuls kept in FP32) and the FP32 ONNX's
                weight MatMuls (what a recipe may keep in FP32)
    search.py   ``Search``: each recipe built by the engine's builder and scored on held-out training rows (never
                dev), the greedy FP32-MatMul fallback, every built candidate cached
    select.py   the searches as the stages set them up: ``SearchRows`` (calibration and held-out training rows,
                ``calibration_feeds``), the settings in the stages'
                cache keys

The builders: ONNX Runtime's fixed-scale form (``pipeline.backends.onnxruntime.int8``) and OpenVINO's NNCF
(``pipeline.backends.openvino.quantize``).
"""
