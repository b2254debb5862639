/* The public structs whose sizes the C11 and C++17 translation units report, so the test
 * can check that C and C++ compilers agree on them. */
// clang-format off
#define LOOM_ABI_STRUCTS(X) \
  X(loom_param_spec) \
  X(loom_ext) \
  X(loom_plugin_descriptor) \
  X(loom_host) \
  X(loom_backend_ref) \
  X(loom_attention_ref) \
  X(loom_tokenizer_ref) \
  X(loom_comm_ref) \
  X(loom_gemm_args) \
  X(loom_gemm_epilogue) \
  X(loom_gemm_epilogues) \
  X(loom_bias_add_args) \
  X(loom_bias_bwd_args) \
  X(loom_embedding_fwd_args) \
  X(loom_embedding_bwd_args) \
  X(loom_act_fwd_args) \
  X(loom_act_bwd_args) \
  X(loom_softmax_args) \
  X(loom_softmax_bwd_args) \
  X(loom_cross_entropy_args) \
  X(loom_vocab_ce_stats_args) \
  X(loom_vocab_ce_bwd_args) \
  X(loom_norm_fwd_args) \
  X(loom_norm_bwd_args) \
  X(loom_rope_args) \
  X(loom_sum_squares_args) \
  X(loom_ops) \
  X(loom_backend_info) \
  X(loom_device_stream) \
  X(loom_backend_api) \
  X(loom_attention_fwd_args) \
  X(loom_attention_bwd_args) \
  X(loom_attention_window) \
  X(loom_attention_seqlens) \
  X(loom_attention_api) \
  X(loom_model_create_args) \
  X(loom_model_param) \
  X(loom_array_spec) \
  X(loom_microbatch) \
  X(loom_stage_tensor) \
  X(loom_stage_info) \
  X(loom_loss) \
  X(loom_stage_forward_args) \
  X(loom_stage_backward_args) \
  X(loom_model_api) \
  X(loom_decode_ext) \
  X(loom_opt_param) \
  X(loom_opt_create_args) \
  X(loom_opt_step_args) \
  X(loom_optimizer_api) \
  X(loom_grad_api) \
  X(loom_schedule_api) \
  X(loom_schedule_step) \
  X(loom_schedule_order_args) \
  X(loom_schedule_order_ext) \
  X(loom_tokenizer_api) \
  X(loom_dataset_api) \
  X(loom_comm_args) \
  X(loom_group_create_args) \
  X(loom_comm_api) \
  X(DLTensor) \
  X(DLDataType) \
  X(DLDevice)
// clang-format on
