"""The CPU's int8-relevant instruction sets, and the INT8 recipe choices they imply.

ONNX Runtime's int8 GEMM speed and numerics depend on them: with AVX512-VNNI (or AVX-VNNI / AMX) u8*s8
products accumulate straight into int32; on plain AVX2 (and AVX512 without VNNI) pairs of u8*s8 products
are summed in int16 first (``vpmaddubsw``), which saturates when large activations meet large weights.
Seven-bit weights (``reduce_range``) cannot saturate there.  Measured ceilings on this project's 2-core
EPYCs: int8/fp32 GEMM 1.9-2.5x on AVX2, about 3.45x with VNNI.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from pathlib import Path

INT8_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8")


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: tuple[str, ...]  # the INT8_FLAGS this CPU has, in INT8_FLAGS order
    cores: int

    @property
    def vnni(self) -> bool:
        return any(f in self.flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))

    @property
    def int8_saturates(self) -> bool:
        """u8s8 GEMM can saturate (int16 pair sums): AVX2/AVX512 without a VNNI dot product."""
        return not self.vnni

    def as_dict(self) -> dict:
        return {**asdict(self), "flags": list(self.flags), "vnni": self.vnni, "int8_saturates": self.int8_saturates}

    def summary(self) -> str:
        return f"{self.model or platform.machine()} [{' '.join(self.flags) or 'no AVX2'}], {self.cores} cores"


def parse_cpuinfo(text: str, cores: int = 0) -> CpuInfo:
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return CpuInfo(model, tuple(f for f in INT8_FLAGS if f in flags), cores)


def detect(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        return parse_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"), cores)
    except OSError:  # not Linux: nothing known, the recipes assume the conservative case
        return CpuInfo(platform.processor(), (), cores)


def missing_flags(validated: list[str] | tuple[str, ...], here: CpuInfo) -> list[str]:
    """Instruction sets the bundle was validated with that this CPU lacks (speed/numerics may differ)."""
    return [f for f in validated if f in INT8_FLAGS and f not in here.flags]
