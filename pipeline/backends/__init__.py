"""One module per runtime (Paddle Inference, ONNX Runtime, TensorRT), each with the same functions."""
