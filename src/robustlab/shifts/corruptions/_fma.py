"""A fused multiply-add for numba kernels: ``a * b + c`` rounded once, on every CPU.

Why: where the reference's library computes with fused multiply-adds (OpenCV's float
RGB-to-grey through IPP, on any CPU with FMA), the same values need the fused operation,
and numba never fuses by itself (it compiles without fast-math, so ``a * b + c`` rounds
twice). ``llvm.fma`` is exact by definition: LLVM emits the CPU's FMA instruction where
there is one and calls libm's correctly rounded ``fmaf`` where there is none (checked by
compiling for a Nehalem, ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``), so the bits do not
depend on the machine, unlike the library call it replaces.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def fma32(typingctx, a, b, c):
    """``a * b + c`` in float32 with one rounding (inside numba kernels only)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic(
            "llvm.fma", [f32], fnty=ir.FunctionType(f32, [f32, f32, f32])
        )
        return builder.call(fn, args)

    return sig, codegen
