"""The ``openvino:`` section of a task config: the CPU properties every OpenVINO session is compiled with, in
compress's timing, the INT8 search, validate and the served bundle alike (recorded in meta.json and bundle.json).

The defaults are chosen, not the plugin's (``pipeline.backends.openvino.session`` says why each): f32 inference
precision, no per-batch dynamic quantization, one stream, no core pinning; snippets code generation only for a
width-independent IR (``width_independent``, the default).  ``properties`` adds or overrides any CPU
plugin property by its OpenVINO name; one the plugin refuses stops the run before any work, naming it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.errors import ConfigError

INFERENCE_PRECISIONS = ("f32", "bf16")


@dataclass(frozen=True)
class CpuProperties:
    threads: int = 0  # 0: OMP_NUM_THREADS (the cores this process may use)
    inference_precision: str = "f32"
    streams: int = 1
    extra: dict = field(default_factory=dict)  # any other CPU property, as given (openvino.properties in a task config)
    # The plugin's generated attention kernels: only for a width-independent IR (``attention.pad_attention``), whose
    # attention reduces over whole 16-column blocks with them too; otherwise they round by the padded width.
    snippets: bool = False

    def __post_init__(self) -> None:
        if self.inference_precision not in INFERENCE_PRECISIONS:
            raise ConfigError(f"openvino.inference_precision: {self.inference_precision!r} is not one of "
                              f"{', '.join(INFERENCE_PRECISIONS)}")

    def as_dict(self) -> dict[str, object]:
        """The CPU plugin's property names and values (what ``compile_model`` gets and ``bundle.json`` records)."""
        props: dict[str, object] = {
            "INFERENCE_NUM_THREADS": self.threads or int(os.environ.get("OMP_NUM_THREADS", "1")),
            "NUM_STREAMS": self.streams,
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": self.inference_precision,
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
            "ENABLE_CPU_PINNING": False,
            "SNIPPETS_MODE": "ENABLE" if self.snippets else "DISABLE",
        }
        props.update(self.extra)
        return props


def refused_property(properties: dict) -> tuple[str, str] | None:
    """(name, reason) of the first property the CPU plugin refuses on its own (each tried on a one-op model:
    OpenVINO's message does not always name it, e.g. "Could not read number of streams from str: lots")."""
    import openvino as ov
    import openvino.opset13 as ops

    from pipeline.backends.openvino.convert import core, reason

    x = ops.parameter([1, 2], ov.Type.f32)
    probe = ov.Model([ops.relu(x)], [x])
    for key, value in properties.items():
        try:
            core().compile_model(probe, "CPU", {key: value})
        except Exception as exc:
            return key, reason(exc)
    return None


@dataclass
class OpenVINOConfig:
    # f32 keeps FP32 numerics; bf16 (where the CPU has AVX512-BF16 or AMX) is a precision choice to measure: on an
    # AVX512-BF16 EPYC it made the FP32 model 1.9x faster and the INT8 one no faster (MEASUREMENTS.md).
    inference_precision: str = "f32"
    properties: dict = field(default_factory=dict)  # e.g. {"ENABLE_HYPER_THREADING": false}
    # true: the INT8 model's attention runs over whole 16-column blocks (pipeline.backends.openvino.attention), so a
    # text's answer is the same to the bit in a batch of any width (served == offline exactly), and the plugin's
    # generated attention kernels ("snippets") can run, being exact too.  Against false (snippets off, a near-tie
    # moving about once in a thousand texts): 1.00-1.07x the time at 4-64 rows, 1.10-1.12x at one (MEASUREMENTS.md).
    width_independent: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.width_independent, bool):
            raise ConfigError(f"openvino.width_independent: {self.width_independent!r} must be true or false")
        if self.inference_precision not in INFERENCE_PRECISIONS:
            raise ConfigError(f"openvino.inference_precision: {self.inference_precision!r} is not one of "
                              f"{', '.join(INFERENCE_PRECISIONS)}")
        for key, value in self.properties.items():
            if not isinstance(key, str) or not key.replace("_", "").isalnum():
                raise ConfigError(f"openvino.properties: {key!r} is not an OpenVINO property name (e.g. NUM_STREAMS)")
            if not isinstance(value, (str, int, float, bool)):
                raise ConfigError(f"openvino.properties.{key}: {value!r} must be a string, number or true/false")

    def cpu_properties(self, threads: int = 0) -> CpuProperties:
        """The session properties for ``threads`` (0: the cores this process may use)."""
        return CpuProperties(threads, self.inference_precision, 1, dict(self.properties), snippets=self.width_independent)

    def served(self) -> dict:
        """What a bundle records and serves with (threads are the package stage's: instances x threads)."""
        return {k: v for k, v in self.cpu_properties().as_dict().items() if k != "INFERENCE_NUM_THREADS"}

    def check(self) -> None:
        """Every property compiles on this CPU (a one-op model): one line naming the first it refuses."""
        props = self.cpu_properties().as_dict()
        bad = refused_property(props)
        if bad is not None:
            raise ConfigError(f"openvino.properties: OpenVINO refuses {bad[0]}={props[bad[0]]!r} ({bad[1]})")
