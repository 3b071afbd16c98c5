#!/usr/bin/env bash
# CMake flags for the llama.cpp that bench-llamacpp builds: the SIMD this
# CPU has (read from /proc/cpuinfo, so the build is as fast as a native
# one), but never AMX. ggml's AMX kernels run `ldtilecfg` without the
# kernel's grant of tile state, which faults (SIGSEGV, a general protection
# fault at `ggml_backend_amx_mul_mat`) on a VM that does not grant it, as
# the 2-core build machine does. libtorch asks for the grant and falls back
# to AVX-512 itself, so both engines run the same instruction sets here.
set -euo pipefail
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
args=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
on() { if has "$1"; then args+=("-D$2=ON"); else args+=("-D$2=OFF"); fi; }
on avx GGML_AVX
on avx2 GGML_AVX2
on fma GGML_FMA
on f16c GGML_F16C
on avx_vnni GGML_AVX_VNNI
on avx512f GGML_AVX512
on avx512vbmi GGML_AVX512_VBMI
on avx512_vnni GGML_AVX512_VNNI
on avx512_bf16 GGML_AVX512_BF16
echo "${args[*]}"
