// cpuid/xgetbv probing. Why not trust OpenBLAS's own detection: Debian's OpenBLAS 0.3.21 does
// not recognise some virtual CPUs (it reports this Xeon as "Prescott", the SSE3 fallback) and
// then runs sgemm ~4x slower than its AVX-512 kernels, which the CPU does have.
#include "cpu_features.hpp"

#include <cpuid.h>

#include <cstdint>
#include <cstring>

namespace loom_cpu {
namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(' ');
  size_t e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

CpuFeatures detect_cpu() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf == 0) return f;

  __cpuid(0, a, b, c, d);
  char vendor[13] = {};
  std::memcpy(vendor + 0, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.vendor = vendor;

  __cpuid(1, a, b, c, d);
  bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.avx = (c >> 28) & 1;
  if (osxsave) {
    uint64_t xcr0 = xgetbv0();
    f.os_avx = (xcr0 & 0x6) == 0x6;       // SSE and AVX (YMM) state
    f.os_avx512 = (xcr0 & 0xE6) == 0xE6;  // plus opmask, ZMM_Hi256, Hi16_ZMM
  }

  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    unsigned max_sub = a;
    if (max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512_bf16 = (a >> 5) & 1;
    }
  }

  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __cpuid(0x80000002u + i, a, b, c, d);
      std::memcpy(brand + 16 * i + 0, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
    f.brand = trim(brand);
  }
  return f;
}

std::string CpuFeatures::isa() const {
  if (has_avx512()) return "AVX-512";
  if (has_avx2_fma()) return "AVX2+FMA";
  if (os_avx && avx) return "AVX";
  return "SSE";
}

std::string CpuFeatures::openblas_coretype() const {
  // OpenBLAS picks its sgemm kernel by core name; these three cover every x86-64 CPU with
  // AVX (AMD Zen runs the Haswell kernels too, as OpenBLAS's own Zen target does).
  if (has_avx512()) return "SkylakeX";
  if (has_avx2_fma()) return "Haswell";
  if (os_avx && avx) return "Sandybridge";
  return "";
}

}  // namespace loom_cpu
