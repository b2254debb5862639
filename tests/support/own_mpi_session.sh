#!/usr/bin/env bash
# Runs its arguments (an mpirun command line, loom_mpirun in tests/CMakeLists.txt) with Open
# MPI's session folders in a fresh temporary folder of its own, removed after: in the shared
# /tmp/ompi.<host>.<uid>, the mpiruns of two tests raced (lib.sh's mpi_session_in says how).
#   own_mpi_session.sh MPIRUN ARGS...
set -u
dir=$(mktemp -d)
OMPI_MCA_orte_tmpdir_base=$dir "$@"
rc=$?
rm -rf "$dir"
exit $rc
