// Field-by-field layout of the public ABI, read from the SDK headers with offsetof. Every
// field of every public struct is listed here; the compiler counts each struct's fields too
// (aggregate initialisation), so a field added without being listed is noticed.
#include "abi_layout.hpp"

#include <cstddef>
#include <sstream>
#include <utility>

#include "loom/loom.h"

namespace loomabi {

namespace {

// Converts to anything: T{AnyField{}, ...} compiles for up to as many fields as T has.
struct AnyField {
  template <class T>
  operator T() const noexcept;  // only used unevaluated
};

template <class T, size_t... I>
constexpr bool initialisable_with(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), AnyField{})...}; };
}

template <class T, size_t N = 0>
constexpr size_t field_count() {
  if constexpr (N > 64) {
    return N;
  } else if constexpr (initialisable_with<T>(std::make_index_sequence<N + 1>{})) {
    return field_count<T, N + 1>();
  } else {
    return N;
  }
}

struct Listing {
  std::vector<Row> rows;
  std::string problems;
};

#define STRUCT(T)                                                             \
  {                                                                           \
    using S = T;                                                              \
    const char* name = #T;                                                    \
    size_t listed = 0;                                                        \
    out.rows.push_back({name, "(sizeof)", (long long)alignof(S), sizeof(S)}); \
    out.rows.push_back({name, "(fields)", 0, field_count<S>()});
#define F(f)                                                                           \
  out.rows.push_back({name, #f, (long long)offsetof(S, f), sizeof(((S*)nullptr)->f)}); \
  ++listed;
#define END                                                                                        \
  if (listed != field_count<S>())                                                                  \
    out.problems += std::string(name) + " has " + std::to_string(field_count<S>()) +               \
                    " fields but tests/abi/abi_layout.cpp lists " + std::to_string(listed) + "; "; \
  }
#define ENUM(E, c) out.rows.push_back({#E, #c, (long long)(c), sizeof(E)});

// clang-format off
Listing build() {
  Listing out;
  // common.h
  STRUCT(loom_param_spec)
  F(struct_size) F(name) F(type) F(default_value) F(doc) F(min_value) F(max_value) F(choices)
  END
  STRUCT(loom_ext) F(struct_size) F(id) F(flags) F(next) END
  // plugin.h
  STRUCT(loom_plugin_descriptor)
  F(struct_size) F(abi_major) F(abi_minor) F(kind) F(name) F(version) F(vendor) F(license)
  F(description) F(params) F(num_params) F(api) F(capabilities) F(ext) F(check_config)
  END
  // host.h
  STRUCT(loom_host)
  F(struct_size) F(abi_major) F(abi_minor) F(ctx) F(error_new) F(error_code) F(error_message)
  F(error_free) F(log) F(config_get_bool) F(config_get_int) F(config_get_float)
  F(config_get_string) F(get_backend) F(get_attention) F(get_tokenizer) F(get_comm) F(rng_seed)
  F(get_layout) F(get_group)
  END
  STRUCT(loom_backend_ref) F(api) F(self) END
  STRUCT(loom_attention_ref) F(api) F(self) END
  STRUCT(loom_tokenizer_ref) F(api) F(self) END
  STRUCT(loom_comm_ref) F(api) F(self) END
  // backend.h
  STRUCT(loom_gemm_args)
  F(struct_size) F(trans_a) F(trans_b) F(m) F(n) F(k) F(alpha) F(beta) F(a) F(lda) F(stride_a)
  F(offset_a) F(b) F(ldb) F(stride_b) F(offset_b) F(c) F(ldc) F(stride_c) F(offset_c) F(batch)
  F(ext)
  END
  STRUCT(loom_gemm_epilogue) F(base) F(kind) F(bias) F(dbias) F(aux) END
  STRUCT(loom_gemm_epilogues) F(base) F(kinds) END
  STRUCT(loom_grouped_gemm_args)
  F(struct_size) F(trans_a) F(trans_b) F(m) F(n) F(k) F(num_groups) F(sizes) F(alpha) F(beta)
  F(a) F(b) F(c) F(ext)
  END
  STRUCT(loom_copy_strided_args)
  F(struct_size) F(dst) F(ld_dst) F(offset_dst) F(src) F(ld_src) F(offset_src) F(rows) F(cols)
  F(ext)
  END
  STRUCT(loom_ssm_conv_args)
  F(struct_size) F(out) F(x) F(weight) F(bias) F(silu) F(state) F(ext)
  END
  STRUCT(loom_ssm_conv_bwd_args)
  F(struct_size) F(dx) F(dweight) F(dbias) F(dout) F(x) F(weight) F(bias) F(silu) F(ext)
  END
  STRUCT(loom_ssm_scan_args)
  F(struct_size) F(y) F(x) F(dt) F(A_log) F(B) F(C) F(D) F(dt_bias) F(chunk) F(chunk_states)
  F(state) F(ext)
  END
  STRUCT(loom_ssm_scan_bwd_args)
  F(struct_size) F(dx) F(ddt) F(dA_log) F(dB) F(dC) F(dD) F(ddt_bias) F(dy) F(x) F(dt) F(A_log)
  F(B) F(C) F(D) F(dt_bias) F(chunk) F(chunk_states) F(ext)
  END
  STRUCT(loom_norm_gate) F(base) F(gate) F(dgate) F(group_size) END
  STRUCT(loom_bias_add_args) F(struct_size) F(out) F(bias) F(ext) END
  STRUCT(loom_bias_bwd_args) F(struct_size) F(dbias) F(dout) F(ext) END
  STRUCT(loom_embedding_fwd_args)
  F(struct_size) F(out) F(ids) F(table) F(accumulate) F(ext)
  END
  STRUCT(loom_embedding_bwd_args) F(struct_size) F(dtable) F(ids) F(dout) F(ext) END
  STRUCT(loom_act_fwd_args) F(struct_size) F(kind) F(out) F(inp) F(ext) END
  STRUCT(loom_act_bwd_args) F(struct_size) F(kind) F(dinp) F(inp) F(dout) F(ext) END
  ENUM(loom_act_kind, LOOM_ACT_GELU_TANH) ENUM(loom_act_kind, LOOM_ACT_SWIGLU)
  ENUM(loom_act_kind, LOOM_ACT_GELU) ENUM(loom_act_kind, LOOM_ACT_TANH)
      ENUM(loom_act_kind, LOOM_ACT_SQUARED_RELU)
  STRUCT(loom_softmax_args) F(struct_size) F(s) F(lse) F(scale) F(causal) F(window) F(ext) END
  STRUCT(loom_softmax_bwd_args) F(struct_size) F(ds) F(p) F(dp) F(scale) F(ext) END
  STRUCT(loom_cross_entropy_args)
  F(struct_size) F(losses) F(dlogits) F(logits) F(targets) F(dloss) F(ext)
  END
  STRUCT(loom_vocab_ce_stats_args)
  F(struct_size) F(stats) F(logits) F(targets) F(vocab_start) F(ext)
  END
  STRUCT(loom_vocab_ce_bwd_args)
  F(struct_size) F(dlogits) F(logits) F(targets) F(vocab_start) F(lse) F(dloss) F(ext)
  END
  STRUCT(loom_norm_fwd_args)
  F(struct_size) F(kind) F(out) F(mean) F(rstd) F(inp) F(weight) F(bias) F(eps) F(ext)
  END
  STRUCT(loom_norm_bwd_args)
  F(struct_size) F(kind) F(dinp) F(dweight) F(dbias) F(dout) F(inp) F(weight) F(mean) F(rstd)
  F(ext)
  END
  ENUM(loom_norm_kind, LOOM_NORM_LAYER) ENUM(loom_norm_kind, LOOM_NORM_RMS)
  STRUCT(loom_rope_args) F(struct_size) F(x) F(pos_offset) F(theta) F(ext) END
  STRUCT(loom_sum_squares_args) F(struct_size) F(x) F(n) F(out) F(ext) END
  STRUCT(loom_sum_squares_total) F(base) F(total) END
  STRUCT(loom_ce_loss_total) F(base) F(total) END
  STRUCT(loom_norm_residual) F(base) F(residual) F(sum) END
  STRUCT(loom_ops)
  F(struct_size) F(gemm) F(bias_add) F(bias_backward) F(fill) F(copy) F(add) F(axpby)
  F(sum_squares) F(embedding_forward) F(embedding_backward) F(norm_forward)
  F(norm_backward) F(act_forward) F(act_backward) F(softmax_forward) F(softmax_backward) F(rope_forward)
  F(rope_backward) F(softmax_cross_entropy)
  F(vocab_ce_stats) F(vocab_ce_backward) F(grouped_gemm) F(copy_strided) F(ssm_conv_forward)
  F(ssm_conv_backward) F(ssm_scan_forward) F(ssm_scan_backward)
  END
  STRUCT(loom_backend_info)
  F(struct_size) F(device_name) F(device) F(peak_gflops) F(mem_in_use) F(mem_peak) F(mem_total) F(kernel_launches) F(host_syncs) F(device_mallocs)
  END
  STRUCT(loom_backend_api)
  F(struct_size) F(create) F(destroy) F(get_info) F(alloc_tensor) F(free_tensor) F(to_host)
  F(from_host) F(synchronize) F(ops) F(get_ext)
  END
  STRUCT(loom_device_stream)
  F(base) F(device) F(stream) F(event_record) F(event_wait) F(event_sync) F(event_free) F(timer_record) F(timer_elapsed) F(timer_free)
  F(read_start) F(read_finish)
  END
  // fp8.h
  STRUCT(loom_fp8_quantize_args)
  F(struct_size) F(src) F(dst) F(dst_t) F(scaling) F(flags) F(margin) F(scale) F(scale_inv)
  F(amax) F(scale_t) F(scale_inv_t) F(ext)
  END
  STRUCT(loom_fp8_update_args)
  F(struct_size) F(history) F(scale) F(scale_inv) F(format) F(margin) F(flags) F(ext)
  END
  STRUCT(loom_fp8_api) F(base) F(scalings) F(quantize) F(delayed_update) END
  STRUCT(loom_gemm_fp8) F(base) F(a_scale_inv) F(b_scale_inv) F(a_scaling) F(b_scaling) END
  // graph.h
  STRUCT(loom_graph_capture_args) F(struct_size) F(body) F(user) F(ext) END
  STRUCT(loom_graph_api) F(base) F(capture) F(launch) F(graph_free) END
  // attention.h
  STRUCT(loom_attention_fwd_args)
  F(struct_size) F(q) F(k) F(v) F(out) F(lse) F(scale) F(causal) F(ext)
  END
  STRUCT(loom_attention_bwd_args)
  F(struct_size) F(dout) F(q) F(k) F(v) F(out) F(lse) F(dq) F(dk) F(dv) F(scale) F(causal)
  F(ext)
  END
  STRUCT(loom_attention_window) F(base) F(window) END
  STRUCT(loom_attention_seqlens)
  F(base) F(num_seqs) F(cu_seqlens_q) F(cu_seqlens_k) F(cu_seqlens_q_padded) F(cu_seqlens_k_padded)
  END
  STRUCT(loom_attention_bias) F(base) F(bias) F(dbias) END
  STRUCT(loom_attention_partial) F(base) END
  STRUCT(loom_attention_merge_args)
  F(struct_size) F(out) F(lse) F(part_out) F(part_lse) F(row0) F(ext)
  END
  STRUCT(loom_attention_api) F(struct_size) F(create) F(destroy) F(forward) F(backward) F(merge)
  END
  STRUCT(loom_fp8_training)
  F(base) F(recipe) F(hybrid) F(margin) F(amax_history_len) F(amax_most_recent)
  F(layers_at_start_bf16) F(layers_at_end_bf16)
  END
  // model.h
  STRUCT(loom_model_create_args)
  F(struct_size) F(vocab_size) F(seq_len) F(micro_batch) F(dtype) F(pipeline_stage)
  F(pipeline_stages) F(recompute_granularity) F(recompute_method) F(recompute_num_layers)
  F(recompute_modules) F(grad_ready) F(grad_ready_user) F(residency) F(unit_needed)
  F(unit_grads) F(residency_user) F(ext)
  END
  STRUCT(loom_model_param)
  F(struct_size) F(name) F(value) F(grad) F(weight_decay) F(tp_split_dim)
  F(tp_num_blocks) F(tp_block_sizes) F(pipeline_duplicate) F(reduce_group) F(tie_group)
  F(buffer) F(unit) F(frozen) F(adapter)
  END
  STRUCT(loom_array_spec) F(struct_size) F(name) F(dtype) F(ndim) F(shape) END
  STRUCT(loom_microbatch)
  F(struct_size) F(batch) F(seq_len) F(num_arrays) F(names) F(arrays) F(ext)
  END
  STRUCT(loom_microbatch_device) F(base) F(arrays) END
  STRUCT(loom_stage_tensor) F(struct_size) F(name) F(dtype) F(ndim) F(shape) END
  STRUCT(loom_loss) F(struct_size) F(name) F(sum) F(count) F(weight) END
  STRUCT(loom_stage_forward_args)
  F(struct_size) F(slot) F(mb) F(loss_scale) F(no_grad) F(num_inputs) F(inputs)
  F(num_outputs) F(outputs) F(num_losses) F(losses) F(ext)
  END
  STRUCT(loom_stage_backward_args)
  F(struct_size) F(slot) F(num_doutputs) F(doutputs) F(num_dinputs) F(dinputs) F(ext)
  END
  STRUCT(loom_model_api)
  F(struct_size) F(create) F(destroy) F(num_params) F(get_param) F(init_params) F(zero_grad)
  F(flops_per_token) F(batch_spec) F(attention_requires)
  F(stage_info) F(stage_forward) F(stage_backward) F(finish_grads) F(hold_params)
  END
  STRUCT(loom_decode_ext) F(base) F(kv_reset) F(decode) F(max_context) END
  STRUCT(loom_decode_slots_ext) F(base) F(kv_clear) F(decode_slots) END
  STRUCT(loom_encode_ext) F(base) F(encode) F(decoder_start) END
  STRUCT(loom_token_stats) F(base) F(loss) F(top1) END
  STRUCT(loom_preference_objective) F(base) F(beta) END
  STRUCT(loom_preference_rows) F(base) F(reference) F(policy) END
  STRUCT(loom_device_losses) F(base) F(sums) END
  // optimizer.h
  STRUCT(loom_opt_param) F(struct_size) F(name) F(param) F(grad) F(weight_decay) END
  STRUCT(loom_opt_create_args) F(struct_size) F(params) F(num_params) F(ext) END
  STRUCT(loom_opt_step_args) F(struct_size) F(lr) F(step) F(grad_scale) F(ext) END
  STRUCT(loom_opt_clip) F(base) F(squares) F(loss_scale) F(max_norm) END
  STRUCT(loom_opt_schedule) F(base) F(values) END
  STRUCT(loom_optimizer_api)
  F(struct_size) F(create) F(destroy) F(step) F(num_state) F(get_state)
  END
  // host.h and model.h (layout, stages)
  STRUCT(loom_parallel_layout)
  F(struct_size) F(world) F(tensor) F(context) F(data) F(pipeline) F(expert) F(virtual_stages)
  F(tensor_rank) F(context_rank) F(data_rank) F(pipeline_rank) F(expert_rank)
  F(sequence_parallel) F(cp_comm_type) F(expert_tensor)
  END
  STRUCT(loom_stage_info)
  F(struct_size) F(batch) F(seq_len) F(is_first) F(is_last) F(num_reads) F(reads)
  F(num_inputs) F(inputs) F(num_outputs) F(outputs) F(num_losses) F(losses)
  END
  // grad.h
  STRUCT(loom_grad_create_args)
  F(struct_size) F(grads) F(num_grads) F(ext) F(reduce_groups) F(units)
  END
  STRUCT(loom_grad_reduce_args) F(struct_size) F(ext) END
  STRUCT(loom_param_shard) F(struct_size) F(param) F(grad) F(offset) END
  STRUCT(loom_grad_api)
  F(struct_size) F(create) F(destroy) F(reduce) F(shard_params) F(after_step)
  F(bytes_per_param) F(grad_ready) F(residency) F(unit_needed) F(unit_grads)
  END
  // schedule.h
  STRUCT(loom_schedule_args)
  F(struct_size) F(model_api) F(chunks) F(num_chunks) F(num_microbatches) F(batch)
  F(seq_len) F(loss_scale) F(get_microbatch) F(user) F(forward_only) F(num_losses) F(losses)
  F(ext)
  END
  STRUCT(loom_schedule_api) F(struct_size) F(create) F(destroy) F(run) END
  STRUCT(loom_schedule_step) F(struct_size) F(phase) F(chunk) F(microbatch) END
  STRUCT(loom_schedule_order_args)
  F(struct_size) F(pipeline) F(virtual_stages) F(num_microbatches) F(chunks) F(stages)
  F(num_steps) F(steps) F(ext)
  END
  STRUCT(loom_schedule_order_ext) F(base) F(order) END
  // tokenizer.h
  STRUCT(loom_tokenizer_api)
  F(struct_size) F(create) F(destroy) F(vocab_size) F(eod_id) F(encode) F(decode)
  F(token_to_id) F(id_to_token)
  END
  // dataset.h
  STRUCT(loom_sample_index_args)
  F(struct_size) F(doc_begin) F(doc_end) F(seq_len) F(num_samples) F(seed) F(ext)
  END
  STRUCT(loom_dataset_api)
  F(struct_size) F(create) F(destroy) F(num_documents) F(document) F(cache_prefix)
  F(sample_spec) F(build_samples) F(sample)
  END
  // comm.h
  STRUCT(loom_comm_args)
  F(struct_size) F(group) F(in) F(out) F(op) F(peer) F(tag) F(stream) F(ext)
  END
  STRUCT(loom_group_create_args)
  F(struct_size) F(colors) F(name) F(ext)
  END
  STRUCT(loom_comm_api)
  F(struct_size) F(create) F(destroy) F(world_rank) F(world_size) F(group_create)
  F(group_destroy) F(group_rank) F(group_size) F(all_reduce) F(reduce_scatter) F(all_gather)
  F(broadcast) F(all_to_all) F(barrier) F(send) F(recv) F(all_to_all_v) F(start) F(wait) F(test) F(abort)
  END
  // DLPack, as it crosses the boundary.
  STRUCT(DLDevice) F(device_type) F(device_id) END
  STRUCT(DLDataType) F(code) F(bits) F(lanes) END
  STRUCT(DLTensor)
  F(data) F(device) F(ndim) F(dtype) F(shape) F(strides) F(byte_offset)
  END

  ENUM(loom_status, LOOM_OK) ENUM(loom_status, LOOM_ERR_INVALID_ARGUMENT)
  ENUM(loom_status, LOOM_ERR_UNIMPLEMENTED) ENUM(loom_status, LOOM_ERR_OUT_OF_MEMORY)
  ENUM(loom_status, LOOM_ERR_IO) ENUM(loom_status, LOOM_ERR_INTERNAL)
  ENUM(loom_plugin_kind, LOOM_KIND_BACKEND) ENUM(loom_plugin_kind, LOOM_KIND_COMM)
  ENUM(loom_plugin_kind, LOOM_KIND_MODEL) ENUM(loom_plugin_kind, LOOM_KIND_ATTENTION)
  ENUM(loom_plugin_kind, LOOM_KIND_GRAD) ENUM(loom_plugin_kind, LOOM_KIND_OPTIMIZER)
  ENUM(loom_plugin_kind, LOOM_KIND_TOKENIZER) ENUM(loom_plugin_kind, LOOM_KIND_DATASET)
  ENUM(loom_plugin_kind, LOOM_KIND_SCHEDULE)
  ENUM(loom_param_type, LOOM_PARAM_BOOL) ENUM(loom_param_type, LOOM_PARAM_INT)
  ENUM(loom_param_type, LOOM_PARAM_FLOAT) ENUM(loom_param_type, LOOM_PARAM_STRING)
  ENUM(loom_log_level, LOOM_LOG_DEBUG) ENUM(loom_log_level, LOOM_LOG_INFO)
  ENUM(loom_log_level, LOOM_LOG_WARN) ENUM(loom_log_level, LOOM_LOG_ERROR)
  ENUM(loom_reduce_op, LOOM_REDUCE_SUM) ENUM(loom_reduce_op, LOOM_REDUCE_MAX)
  ENUM(loom_reduce_op, LOOM_REDUCE_MIN) ENUM(loom_reduce_op, LOOM_REDUCE_AVG)
  ENUM(loom_comm_call, LOOM_COMM_CALL_ALL_REDUCE)
  ENUM(loom_comm_call, LOOM_COMM_CALL_REDUCE_SCATTER)
  ENUM(loom_comm_call, LOOM_COMM_CALL_ALL_GATHER)
  ENUM(loom_group_kind, LOOM_GROUP_WORLD) ENUM(loom_group_kind, LOOM_GROUP_TENSOR)
  ENUM(loom_group_kind, LOOM_GROUP_CONTEXT) ENUM(loom_group_kind, LOOM_GROUP_DATA)
  ENUM(loom_group_kind, LOOM_GROUP_PIPELINE) ENUM(loom_group_kind, LOOM_GROUP_DATA_CONTEXT)
  ENUM(loom_group_kind, LOOM_GROUP_MODEL) ENUM(loom_group_kind, LOOM_GROUP_EMBEDDING)
  ENUM(loom_group_kind, LOOM_GROUP_EXPERT) ENUM(loom_group_kind, LOOM_GROUP_EXPERT_DATA)
  return out;
}
// clang-format on

#undef STRUCT
#undef F
#undef END
#undef ENUM

}  // namespace

std::vector<Row> layout() { return build().rows; }

std::string listing_problems() { return build().problems; }

std::string format(const std::vector<Row>& rows) {
  std::ostringstream out;
  out << "# Loom public ABI layout (x86-64 Linux, LP64), one line per field:\n"
         "#   struct field offset size\n"
         "# plus per struct \"(sizeof) alignof sizeof\" and \"(fields) 0 count\", and per enum\n"
         "# constant \"enum constant value sizeof\". tests/abi checks the headers against it.\n"
         "# Regenerate only together with an ABI version bump:\n"
         "#   build/bin/loom-abi-dump > tests/abi/abi_v"
      << LOOM_ABI_MAJOR << ".golden\n";
  out << "abi " << LOOM_ABI_MAJOR << "." << LOOM_ABI_MINOR << "\n";
  for (const Row& r : rows)
    out << r.type << " " << r.field << " " << r.offset << " " << r.size << "\n";
  return out.str();
}

}  // namespace loomabi
