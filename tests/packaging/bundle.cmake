# The GPU bundle, checked where there is no GPU (tools/gpu-bundle, tools/gpu-check):
#   bundle.selftest   packs this build into one archive (at most 40 MiB), runs it in a root
#                     that holds glibc and a static busybox only (no Debian library of ours,
#                     no CUDA), and runs tools/gpu-check --bundle on it, which must list every
#                     GPU row "skipped (no CUDA device)" and exit 0.
# Not in the sanitizer build (the bundle is a Release product), and only where the CUDA
# plugins were built (they are what the bundle is for).
if(LOOM_SANITIZE OR NOT TARGET loom_backend_cuda)
  return()
endif()
add_test(NAME bundle.selftest
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bundle_selftest.sh ${PROJECT_BINARY_DIR})
set_tests_properties(bundle.selftest PROPERTIES LABELS "bundle" TIMEOUT 600
  SKIP_RETURN_CODE 77 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
