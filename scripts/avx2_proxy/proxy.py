"""Research instrument: run the pipeline on an AVX-512 CPU as if it had AVX2 only.

Issue 60's AVX2 targets need an AVX2-only CPU (AMD Zen 3 is the one this project saw), and the
sessions' machines mostly have AVX-512 VNNI.  The engines choose their kernels from `cpuid` and
`xgetbv` at start-up (ONNX Runtime's MLAS, OpenVINO's CPU plugin and oneDNN, Paddle, MKL), so
this copies those libraries with each `cpuid`/`xgetbv` instruction rewritten into a trap that
hide_avx512.c answers with the AVX-512, VNNI and BF16 bits cleared.  The same core then runs
its AVX2 kernels.  It is a proxy: the ISA is AVX2's, the core, clock and caches stay the host's.

    python scripts/avx2_proxy/proxy.py build /tmp/avx2          # once: gcc + objdump, ~4 min
    python scripts/avx2_proxy/proxy.py check /tmp/avx2          # what the engines see, with and without it
    python scripts/avx2_proxy/proxy.py run /tmp/avx2 -- make bench TASK=tnews ...

`run` prepends DIR/site to PYTHONPATH (the patched packages shadow the venv's) and preloads the
trap handler, which also answers /proc/cpuinfo without those flags (the pipeline reads it to report
the CPU and choose its INT8 recipes).  Libraries not copied (numpy, tokenizers) see the real CPU.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent

# package -> its libraries whose kernels depend on the ISA (glob patterns inside the package)
LIBRARIES = {
    "onnxruntime": ["capi/onnxruntime_pybind11_state*.so"],
    "openvino": ["libs/libopenvino.so.*", "libs/libopenvino_intel_cpu_plugin.so"],
    "paddle": ["base/libpaddle.so", "libs/libdnnl.so*", "libs/libmklml_intel.so", "libs/libiomp5.so"],
}

# flags an AVX2-only x86-64 (AMD Zen 3) lacks: hidden from /proc/cpuinfo as from cpuid
HIDDEN_FLAGS = re.compile(r"^(avx512\w*|avx_vnni\w*|amx\w*|avx10\w*)$")

# instruction -> (its bytes, the trap hide_avx512.c recognises: ud2 / ud1 eax,eax)
REWRITE = {"cpuid": (b"\x0f\xa2", b"\x0f\x0b"), "xgetbv": (b"\x0f\x01\xd0", b"\x0f\xb9\xc0")}


def sections(lib: Path) -> list[tuple[int, int, int]]:
    """(vma, size, file offset) of every section."""
    out = subprocess.run(["objdump", "-h", str(lib)], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0].isdigit():
            rows.append((int(parts[3], 16), int(parts[2], 16), int(parts[5], 16)))
    return rows


def patch(lib: Path) -> dict[str, int]:
    """Rewrite, in place, every cpuid/xgetbv objdump finds at an instruction start."""
    rows = sections(lib)
    listing = subprocess.run(["objdump", "-d", str(lib)], check=True, capture_output=True, text=True).stdout
    found = re.findall(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{2} )+\s*(cpuid|xgetbv)\s*$", listing, re.M)
    with open(lib, "r+b") as f:
        for address, name in found:
            old, new = REWRITE[name]
            vma = int(address, 16)
            offset = next(off + vma - start for start, size, off in rows if start <= vma < start + size)
            f.seek(offset)
            if f.read(len(old)) != old:
                raise SystemExit(f"{lib}: {address} is not {name}")
            f.seek(offset)
            f.write(new)
    return {name: sum(1 for _, n in found if n == name) for name in REWRITE}


def build(out: Path) -> None:
    site_packages = Path(sysconfig.get_paths()["purelib"])
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", str(out / "hide_avx512.so"),
                    str(HERE / "hide_avx512.c"), "-ldl"], check=True)
    lines = []
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, sep, value = line.partition(":")
        if key.strip() == "flags":
            line = key + sep + " " + " ".join(f for f in value.split() if not HIDDEN_FLAGS.match(f))
        lines.append(line)
    (out / "cpuinfo").write_text("\n".join(lines) + "\n")
    for package, libs in LIBRARIES.items():
        target = out / "site" / package
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(site_packages / package, target, symlinks=True)
        for pattern in libs:
            found = sorted(p for p in target.glob(pattern) if not p.is_symlink())
            if not found:
                raise SystemExit(f"{package}: no {pattern} (another version of {package}?)")
            for lib in found:
                print(f"{lib.relative_to(out / 'site')}: patched {patch(lib)}", flush=True)


# What each engine sees, printed by `check` with and without the proxy: ONNX Runtime has no query, so its int8
# GEMM is timed (AVX2's u8s8 kernel takes about twice VNNI's time).
CHECK = """
import time, numpy as np, onnx, onnxruntime as ort, openvino as ov, paddle
from onnx import TensorProto, helper, numpy_helper
from pipeline.contract import detect_cpu
w = numpy_helper.from_array(np.random.default_rng(0).integers(-127, 127, (1024, 1024), dtype=np.int8), "w")
graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [256, 1024])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [256, 1024])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
options = ort.SessionOptions()
options.intra_op_num_threads = 1
s = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
a = {"a": np.random.default_rng(1).integers(0, 255, (256, 1024), dtype=np.uint8)}
for _ in range(5):
    s.run(None, a)
t = time.perf_counter()
for _ in range(30):
    s.run(None, a)
print(f"  /proc/cpuinfo: {detect_cpu().summary()}")
print(f"  onnxruntime {ort.__file__}: u8s8 GEMM 256x1024x1024 {(time.perf_counter() - t) / 30 * 1e3:.2f} ms")
print(f"  openvino: {ov.Core().get_property('CPU', 'OPTIMIZATION_CAPABILITIES')}")
print(f"  paddle: supports_vnni {paddle.base.core.supports_vnni()}, bfloat16 {paddle.base.core.supports_bfloat16()}")
"""


def check(out: Path) -> int:
    for label, runner in (("this CPU", subprocess.call), ("the proxy", lambda c: run(out, c))):
        print(f"{label}:", flush=True)
        if runner([sys.executable, "-c", CHECK]) != 0:
            return 1
    return 0


def run(out: Path, command: list[str]) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(out / "site"), env.get("PYTHONPATH")] if p)
    env["LD_PRELOAD"] = str(out / "hide_avx512.so")
    env["AVX2_PROXY_CPUINFO"] = str(out / "cpuinfo")
    return subprocess.call(command, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build").add_argument("dir", type=Path)
    sub.add_parser("check", help="what the engines see, with and without the proxy").add_argument("dir", type=Path)
    runner = sub.add_parser("run")
    runner.add_argument("dir", type=Path)
    runner.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.action == "build":
        build(args.dir)
        return 0
    if args.action == "check":
        return check(args.dir)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run(args.dir, command)


if __name__ == "__main__":
    sys.exit(main())
