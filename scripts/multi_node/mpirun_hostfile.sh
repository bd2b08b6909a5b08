#!/usr/bin/env bash
# Trains on several machines with OpenMPI's mpirun and a hostfile, one rank per GPU, under
# scripts/supervise.sh: when a rank or a node dies, the job is restarted from the newest complete
# checkpoint. Edit the hostfile between restarts to drop a dead node: the run resumes on the ranks
# that are left (the ZeRO-1 optimizer state is re-sharded), as long as -d stays a multiple of
# B·T·ranks.
#   usage: HOSTFILE=hosts.txt GPUS_PER_NODE=8 scripts/multi_node/mpirun_hostfile.sh TRAINER_FLAGS...
# hosts.txt lists one machine per line as "name slots=8". TRAINER_FLAGS must include -o DIR, -x N
# and -y 1 (e.g. the flags of scripts/run_gpt2_124M.sh); every machine needs the same build and the
# same data paths. NCCL_SOCKET_IFNAME / MPI_IFACE pick the network interface (docs/PARALLELISM.md,
# "Several machines").
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${HOSTFILE:?set HOSTFILE to a file listing the machines (name slots=GPUS)}"
gpus="${GPUS_PER_NODE:-8}"
nodes=$(grep -cv '^\s*\(#\|$\)' "$HOSTFILE")
iface=()
[ -n "${MPI_IFACE:-}" ] && iface=(--mca btl_tcp_if_include "$MPI_IFACE" --mca oob_tcp_if_include "$MPI_IFACE")
exec scripts/supervise.sh --max-restarts "${MAX_RESTARTS:-20}" -- \
  mpirun -np $((nodes * gpus)) --hostfile "$HOSTFILE" --npernode "$gpus" --bind-to none "${iface[@]}" \
  -x PATH -x LD_LIBRARY_PATH -x NCCL_SOCKET_IFNAME -x NCCL_IB_HCA -x NCCL_DEBUG \
  ./train_gpt "$@"
