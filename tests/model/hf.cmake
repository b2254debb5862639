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

find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi OR NOT TARGET loom)
  return()
endif()
add_test(NAME model.hf_interop
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/hf_interop.sh $<TARGET_FILE:loom> ${MPIEXEC_EXECUTABLE})
set(_hf_env OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader LOOM_PLUGIN_PATH=)
if(LOOM_SANITIZE)
  list(APPEND _hf_env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)  # see tests/comm
endif()
set_tests_properties(model.hf_interop PROPERTIES LABELS "model" TIMEOUT 600
                     ENVIRONMENT "${_hf_env}")

# Against the real `transformers` (save_pretrained / from_pretrained): the GPU machine's
# python3 has it, so it is labelled gpu and runs there through tools/gpu-check; it needs no
# GPU and skips (77) where the library is missing.
add_test(NAME model.hf_transformers
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/hf_transformers.sh $<TARGET_FILE:loom>)
set_tests_properties(model.hf_transformers PROPERTIES LABELS "gpu;model" TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "LOOM_PLUGIN_PATH=")
