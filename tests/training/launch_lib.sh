# Sourced by the launch tests (launch.sh, setup_signal.sh): tests/support/lib.sh, a scratch
# folder to work in, and a tiny GPT recipe that trains in milliseconds per step.
#   . launch_lib.sh   (sets dir and cds into it; removed on exit)
# shellcheck source=../support/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../support/lib.sh"
scratch
# launch_recipe FILE: 1 layer of width 32 on dataset/mock, comm/mpi, backend.threads left to
# its default (what launch.sh checks); tests add --set overrides.
launch_recipe() {
  {
    toml_section train seed=11 iters=3 micro_batch_size=2 seq_len=16 log_interval=1
    toml_section lr max=1e-3
    gpt_sections threads= n_layer=1 n_head=2 num_documents=50 doc_length=32
    toml_section comm plugin=mpi
  } > "$1"
}
