// What the CPU can do, from cpuid: drives the OpenBLAS core type and the device name.
#pragma once

#include <string>

namespace loom_cpu {

struct CpuFeatures {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  std::string brand;   // "Intel(R) Xeon(R) Processor", trimmed
  bool avx = false, fma = false, avx2 = false;
  bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false;
  // The OS saves the wide registers on context switch (XGETBV): without it AVX/AVX-512
  // instructions fault even when cpuid lists them.
  bool os_avx = false, os_avx512 = false;

  bool has_avx512() const {  // the subset OpenBLAS's SkylakeX kernels need
    return os_avx512 && avx512f && avx512dq && avx512bw && avx512vl;
  }
  bool has_avx2_fma() const { return os_avx && avx2 && fma; }
  // "AVX-512", "AVX2+FMA", "AVX" or "SSE" — for the device name.
  std::string isa() const;
  // The OPENBLAS_CORETYPE whose kernels fit: "SkylakeX", "Haswell", "Sandybridge", or "" to
  // leave it to OpenBLAS.
  std::string openblas_coretype() const;
};

CpuFeatures detect_cpu();

}  // namespace loom_cpu
