"""ONNX Runtime inside Triton's python backend: the engine ``runner.py`` runs a bundle's ONNX with.

Copied into bundles as ``<task>_model/1/engine.py`` (``pipeline.backends.engine.ServedEngine``): it imports numpy
and ONNX Runtime only, and runs on the serving image's Python (3.8 on FastDeploy's)."""

from __future__ import annotations

# ONNX Runtime 1.31.1 fuses a residual Add and the LayerNormalization after it into SkipLayerNormalization wherever the
# Add's input comes from a MatMul that carries its bias (every fixed-scale INT8 MatMulIntegerToFloat here; the FP32
# graph keeps Add + LayerNormalization).  On CPU that fused kernel runs on one thread at ~2 us a row of 384: 4-12x the
# pair it replaces (MEASUREMENTS.md, "SkipLayerNormalization"); unfused, the pruned TNEWS INT8 runs ~1.17x faster
# (its logits the same to the bit).  The pipeline's ONNX Runtime sessions read this too: what is validated is served.
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)


# ORT's pool threads spin between ops by default: alone on a machine that buys a little latency, but in a server they
# burn the cores the tokenizer, post-processing and Triton itself need, so the served engine does not spin.  The
# pipeline's ONNX Runtime sessions do not either: spinning, an INT8 form ran 2-11% faster offline than served (TNEWS
# w7/12, Zen 4), which flattered ONNX Runtime against OpenVINO in compress's selection; and its threads spun on for
# ~45 ms after each call, on the cores of whatever was timed next (MEASUREMENTS.md, Method).
SESSION_CONFIG = {"session.intra_op.allow_spinning": "0"}


def disabled_optimizers(providers: list) -> list:
    """The graph fusions a session on ``providers`` leaves out: ``CPU_DISABLED_OPTIMIZERS`` on the CPU alone (CUDA's
    SkipLayerNormalization kernel is not the slow one)."""
    return list(CPU_DISABLED_OPTIMIZERS) if list(providers) == ["CPUExecutionProvider"] else []


class Engine:
    def __init__(self, path, threads: int, gpu: bool, params: dict):
        import onnxruntime as ort

        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
        for key, value in SESSION_CONFIG.items():
            so.add_session_config_entry(key, value)
        providers = ["CPUExecutionProvider"]
        if gpu and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(str(path), so, providers=providers,
                                            disabled_optimizers=disabled_optimizers(providers))
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.output = self.session.get_outputs()[0].name

    def __call__(self, feeds):
        return self.session.run([self.output], {k: v for k, v in feeds.items() if k in self.inputs})[0]
