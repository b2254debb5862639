# Every parallel layout trains the same model as one rank (equivalence.sh), through the real
# `loom` executable under mpirun, for a GPT-2-style and a Llama-style (GQA) model, and BERT.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi)
  return()
endif()
set(_env OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader LOOM_PLUGIN_PATH=)
if(LOOM_SANITIZE)
  list(APPEND _env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)  # see tests/comm
endif()
foreach(model gpt llama)
  foreach(layout tp2 tp2sp pp2 pp2vp2 pp4gpipe dp2 dp2dist tp2pp2 tp2dp2dist tp2sp-packed
                 pp2-packed dp2fsdp dp4fsdp dp2fsdp2 tp2dp2fsdp)
    add_test(NAME layouts.${model}.${layout}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                     ${MPIEXEC_EXECUTABLE} ${model} ${layout})
    set_tests_properties(layouts.${model}.${layout} PROPERTIES
      LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
  endforeach()
endforeach()

# Context parallelism (ring attention with Megatron's load-balanced chunks): CP2, CP4, beside
# TP2, PP2 and the distributed optimizer for GPT; CP2 for the Llama-style GQA model.
foreach(layout cp2 cp4 cp2tp2 cp2pp2 cp2dp2dist cp4-flash cp2a2a cp4a2a cp2tp2a2a)
  add_test(NAME layouts.gpt.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                   ${MPIEXEC_EXECUTABLE} gpt ${layout})
  set_tests_properties(layouts.gpt.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()
foreach(layout cp2 cp2tp2 cp2-flash cp2a2a cp2a2a-flash)
  add_test(NAME layouts.llama.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                   ${MPIEXEC_EXECUTABLE} llama ${layout})
  set_tests_properties(layouts.llama.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()

# model/bert (padding, token types, both heads) on dataset/bert, in the layouts Megatron
# trains BERT with.
foreach(layout tp2 tp2sp pp2 dp2dist)
  add_test(NAME layouts.bert.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                   ${MPIEXEC_EXECUTABLE} bert ${layout})
  set_tests_properties(layouts.bert.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()

# model/t5 on dataset/t5, in the layouts the issue asks of T5 (Megatron trains T5 with TP
# and DP; its pipeline split of encoder and decoder is not implemented).
foreach(layout tp2 dp2 dp2dist)
  add_test(NAME layouts.t5.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                   ${MPIEXEC_EXECUTABLE} t5 ${layout})
  set_tests_properties(layouts.t5.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()
# The relative position bias: its (heads, buckets) tables split over the tensor ranks.
foreach(layout tp2 dp2dist)
  add_test(NAME layouts.t5rel.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                   ${MPIEXEC_EXECUTABLE} t5rel ${layout})
  set_tests_properties(layouts.t5rel.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()

# A Mixtral-style mixture of experts (model/gpt, num_experts = 4, top-2, balancing and z
# losses) under data parallelism, the distributed optimizer, and tensor parallelism of the
# attention with the experts whole on every tensor rank; expert parallelism (the all-to-all
# dispatcher) alone, with the distributed optimizer sharding the experts over the
# expert-data group, and beside tensor parallelism; expert tensor parallelism (each expert's
# MLP split over the tensor group), alone and with EP2.
foreach(layout tp2 dp2 dp2dist ep2 ep2dp2dist ep2tp2 etp2 ep2etp2)
  add_test(NAME layouts.moe.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                   ${MPIEXEC_EXECUTABLE} moe ${layout})
  set_tests_properties(layouts.moe.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()
# DeepSeek-V3's router: sigmoid scores and the aux-loss-free expert bias, whose update sums
# the step's loads over the data-parallel ranks, so that every layout routes alike.
foreach(layout dp2 ep2 ep2dp2dist ep2etp2)
  add_test(NAME layouts.moebias.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/equivalence.sh $<TARGET_FILE:loom>
                   ${MPIEXEC_EXECUTABLE} moebias ${layout})
  set_tests_properties(layouts.moebias.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()

# Sharded checkpoints (model shards per tensor/pipeline rank, optimizer shards per data
# rank) resume bitwise at the same layout.
foreach(layout tp2pp2 tp2dp2dist moe-tp2dp2dist moe-ep2 moe-ep2dp2dist moebias-ep2etp2 cp2dp2
               cp2dp2dist)
  add_test(NAME layouts.resume.${layout}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/resume.sh $<TARGET_FILE:loom> ${MPIEXEC_EXECUTABLE}
                   ${layout})
  set_tests_properties(layouts.resume.${layout} PROPERTIES
    LABELS "layouts" TIMEOUT 300 ENVIRONMENT "${_env}")
endforeach()

# FSDP (parallel.data = "fsdp"): bitwise resume, resharding to and from other layouts, the
# measured memory per parameter against the ZeRO table, refusals, overlap_param_gather.
add_test(NAME layouts.fsdp
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fsdp.sh $<TARGET_FILE:loom> ${MPIEXEC_EXECUTABLE})
set_tests_properties(layouts.fsdp PROPERTIES LABELS "layouts" TIMEOUT 600 ENVIRONMENT "${_env}")

# A checkpoint of one layout resumes on any other (resharding) and follows the straight run.
foreach(model gpt llama moe)
  add_test(NAME layouts.reshard.${model}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reshard.sh $<TARGET_FILE:loom> ${MPIEXEC_EXECUTABLE}
                   ${model})
  set_tests_properties(layouts.reshard.${model} PROPERTIES
    LABELS "layouts" TIMEOUT 600 ENVIRONMENT "${_env}")
endforeach()
