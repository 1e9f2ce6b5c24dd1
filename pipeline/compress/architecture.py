"""A student's shape: the share of heads and FFN neurons (DynaBERT's width) and of encoder layers (its depth) it keeps.

compress plans one candidate family per architecture of ``compress.width_mult_list`` x ``compress.depth_mult_list``;
the unpruned one (1, 1) is the FP32 baseline every drop and speed ratio counts from.  A candidate's name starts with
its architecture's: "fp32" unpruned, "w0.6667", "d0.6667" (every head, 2/3 of the layers), "w0.6667-d0.6667".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Architecture:
    width: float = 1.0  # heads and FFN neurons kept per layer (``dynabert.pruned_sizes``)
    depth: float = 1.0  # encoder layers kept (``dynabert.kept_layers``)

    @property
    def pruned(self) -> bool:
        return self.width < 1.0 or self.depth < 1.0

    @property
    def name(self) -> str:
        """Its FP32 candidate's name; its INT8 candidates' names add "-<engine suffix>"."""
        parts = ([f"w{self.width:.4g}"] if self.width < 1.0 else []) + ([f"d{self.depth:.4g}"] if self.depth < 1.0 else [])
        return "-".join(parts) or "fp32"


UNPRUNED = Architecture()


def architectures(widths: Sequence[float], depths: Sequence[float]) -> list[Architecture]:
    """The unpruned architecture first, then every (width, depth) pair of the lists in their order, each once."""
    out = [UNPRUNED]
    for depth in depths:
        for width in widths:
            a = Architecture(width, depth)
            if a not in out:
                out.append(a)
    return out
