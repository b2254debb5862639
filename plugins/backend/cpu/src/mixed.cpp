// Mixed-precision staging (mixed.hpp): f32 stand-ins of bf16/f16 tensors, conversions.
#include "mixed.hpp"

#include <omp.h>

#include "loom/cpp/half.hpp"

namespace loom_cpu {

void half_to_f32(DLDataType dt, const uint16_t* src, float* dst, int64_t n, int nt) {
  if (is_bf16(dt))
    convert(dst, src, n, nt, [](uint16_t v) { return loom::bf16_to_f32(v); });
  else
    convert(dst, src, n, nt, [](uint16_t v) { return loom::f16_to_f32(v); });
}

void f32_to_half(DLDataType dt, const float* src, uint16_t* dst, int64_t n, int nt) {
  if (is_bf16(dt))
    convert(dst, src, n, nt, [](float v) { return loom::f32_to_bf16(v); });
  else
    convert(dst, src, n, nt, [](float v) { return loom::f32_to_f16(v); });
}

void Staging::f32_only(const char* name, const DLTensor* t) const {
  if (t && !is_f32(t->dtype))
    ck_.fail(std::string(name) + " is " + dtype_str(t->dtype) +
             "; in a bf16/f16 mixed-precision call saved statistics and losses are f32");
}

DLTensor* Staging::stage(const char* name, const DLTensor* t, bool write) {
  if (t == nullptr) return nullptr;
  ck_.tensor(name, t);
  DLDataType d = t->dtype;
  if (is_f32(d) || is_i32(d)) return const_cast<DLTensor*>(t);
  if (!is_half(d))
    ck_.fail(std::string(name) + " is " + dtype_str(d) +
             "; a mixed-precision call takes bf16 or f16 tensors with f32 ones (f64 runs are "
             "all f64)");
  if (half_name_ == nullptr) {
    half_name_ = name;
    half_ = d;
  } else if (!loom_dtype_eq(d, half_)) {
    ck_.fail(std::string(name) + " is " + dtype_str(d) + " but " + half_name_ + " is " +
             dtype_str(half_) + "; one call has one compute dtype");
  }
  const char* bytes = static_cast<const char*>(t->data) + t->byte_offset;
  const int64_t n = loom_tensor_numel(t);
  for (Entry& e : entries_) {
    const char* eb = static_cast<const char*>(e.orig->data) + e.orig->byte_offset;
    if (eb == bytes && loom_tensor_numel(e.orig) == n) {
      e.write = e.write || write;
      return &e.view;
    }
  }
  Entry& e = entries_.emplace_back();
  e.orig = const_cast<DLTensor*>(t);
  e.write = write;
  e.data.resize(static_cast<size_t>(n));
  e.shape.assign(t->shape, t->shape + t->ndim);
  half_to_f32(d, reinterpret_cast<const uint16_t*>(bytes), e.data.data(), n, nt_);
  e.view.data = e.data.data();
  e.view.device = DLDevice{kDLCPU, 0};
  e.view.ndim = t->ndim;
  e.view.dtype = loom_f32();
  e.view.shape = e.shape.data();
  e.view.strides = nullptr;
  e.view.byte_offset = 0;
  return &e.view;
}

void Staging::store() {
  for (Entry& e : entries_)
    if (e.write)
      f32_to_half(e.orig->dtype, e.data.data(), data_of<uint16_t>(e.orig),
                  static_cast<int64_t>(e.data.size()), nt_);
}

}  // namespace loom_cpu
