# Hugging Face interop through the `loom` executable against stored PyTorch references
# (hf/make_reference.py): import logits, byte-identical export, round trips, refusals and
# finetuning on one rank and under TP2 (hf_interop.sh).

# Hostile and stale folders: config.json sizes against the tensors, index entries outside
# the folder, export-hf over an old export, the padded vocabulary in a round trip's diff
# (hf_hostile.sh). One process, no MPI.
if(TARGET loom)
  add_test(NAME model.hf_hostile
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/hf_hostile.sh $<TARGET_FILE:loom>)
  set(_hostile_env LOOM_PLUGIN_PATH=)
  if(LOOM_SANITIZE)  # its memory bound cannot be ulimit -v under ASan (hf_hostile.sh)
    list(APPEND _hostile_env LOOM_TEST_ASAN=1)
  endif()
  set_tests_properties(model.hf_hostile PROPERTIES LABELS "model" TIMEOUT 300
                       ENVIRONMENT "${_hostile_env}")
endif()

# A tokenizer_config.json's chat_template recorded as serve.chat_format when it is a known
# chat format (hf_chat_format.sh).
if(TARGET loom)
  loom_script_test(model.hf_chat_format hf_chat_format.sh 120 "LOOM_PLUGIN_PATH=")
endif()

# LoRA's exports: export-peft against the merged export as PEFT merges (GPT-2's transposed
# Conv1D), the frozen weights unchanged, and the refusals (hf_peft.sh).
if(TARGET loom)
  loom_script_test(model.hf_peft hf_peft.sh 300 "LOOM_PLUGIN_PATH=")
endif()

find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi OR NOT TARGET loom)
  return()
endif()
loom_mpi_env(_hf_env LOOM_PLUGIN_PATH=)
loom_script_test(model.hf_interop hf_interop.sh 600 "${_hf_env}" ${MPIEXEC_EXECUTABLE})

# Against the real `transformers` (save_pretrained / from_pretrained): the GPU machine's
# python3 has it, so it is labelled gpu and runs there through tools/gpu-check; it needs no
# GPU and skips (77) where the library is missing.
add_test(NAME model.hf_transformers
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/hf_transformers.sh $<TARGET_FILE:loom>)
set_tests_properties(model.hf_transformers PROPERTIES LABELS "gpu;model" TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "LOOM_PLUGIN_PATH=")
