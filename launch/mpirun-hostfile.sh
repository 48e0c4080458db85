#!/usr/bin/env bash
# mpirun-hostfile.sh: run burnin across the nodes of a hostfile with OpenMPI's mpirun,
# one rank per GPU (--map-by ppr:G:node), with the NCCL/UCX network settings a rented
# cluster needs. Run it on the first node; burnin must be at the same path everywhere.
#
#   launch/mpirun-hostfile.sh --hostfile hosts --gpus-per-node 8 [--nic IF] [--hca LIST]
#       [--burnin PATH] [--dry-run] -- BURNIN-ARGS...
#
#   e.g. launch/mpirun-hostfile.sh --hostfile hosts --gpus-per-node 8 --nic ens10f0 \
#          --hca mlx5_0,mlx5_1,mlx5_2,mlx5_3 -- sweep --backend nccl -c all -b 8 -e 8G \
#          --tiers all --topology topologies/hgx-h200-ib.toml --out results/cluster
#
# As the launcher of a whole acceptance (burnin run appends its binary and each phase
# after the --, and every rank gets the network settings):
#   bin/burnin run --card cards/hgx-h200-ib.toml --launch 'launch/mpirun-hostfile.sh
#          --hostfile hosts --gpus-per-node 8 --nic ens10f0 --hca mlx5_0,mlx5_1 --'

#
# hostfile: one node per line, `node01 slots=8` (comments with #).
#
# Picking the network (do this once per cluster, on one node):
#   --nic IF   the Ethernet interface the nodes reach each other on, for MPI's own
#              traffic and NCCL's bootstrap (NCCL_SOCKET_IFNAME): `ip -br addr` shows
#              the one with the cluster's address; never lo or docker0.
#   --hca LIST the InfiniBand/RoCE adapters for NCCL (NCCL_IB_HCA) and UCX
#              (UCX_NET_DEVICES, as mlx5_0:1): `ibstat` or `ibv_devinfo` list them with
#              their state (take the Active ones), `ibdev2netdev` maps them to
#              interfaces, and `nvidia-smi topo -m` shows which NIC sits next to which
#              GPU (PIX/PXB = same PCIe switch: one such NIC per GPU is the rail).
#              Leave out storage or management adapters.
# Without --hca, NCCL picks the adapters itself (fine when they are all for compute).
# mpirun: the one on PATH (the node's Open MPI or HPC-X), else the release tarball's
# bin/burnin-mpirun (its bundled Open MPI); MPIRUN=PATH names another.
# Anything else can be set in the environment before calling (NCCL_DEBUG=INFO to see
# the chosen paths, NCCL_ALGO=RING for a plain network test); every NCCL_*, UCX_* and
# CUDA_* variable set here is passed to the ranks.
set -euo pipefail

die() { printf 'mpirun-hostfile: %s\n' "$*" >&2; exit 2; }

hostfile="" gpus="" nic="" hca="" dry=0
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# the release tarball's bin/burnin, else a checkout's build
burnin="${BURNIN:-$top/bin/burnin}"
[ -x "$burnin" ] || burnin="$top/target/release/burnin"
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile) hostfile="$2"; shift 2 ;;
    --gpus-per-node) gpus="$2"; shift 2 ;;
    --nic) nic="$2"; shift 2 ;;
    --hca) hca="$2"; shift 2 ;;
    --burnin) burnin="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (burnin's own arguments go after --)" ;;
  esac
done
[ -f "${hostfile:-/nonexistent}" ] || die "--hostfile FILE is required (one 'node slots=G' per line)"
[[ "$gpus" =~ ^[1-9][0-9]*$ ]] || die "--gpus-per-node G is required (GPUs on each node)"
[ $# -gt 0 ] || die "give burnin's arguments after --, e.g. -- sweep --backend nccl -c all"
nodes="$(grep -cvE '^[[:space:]]*(#|$)' "$hostfile" || true)"
[ "$nodes" -ge 1 ] || die "$hostfile lists no node"
np=$((nodes * gpus))

env_args=()
if [ -n "$nic" ]; then
  export NCCL_SOCKET_IFNAME="$nic"
fi
if [ -n "$hca" ]; then
  export NCCL_IB_HCA="$hca"
  # UCX wants device:port; port 1 unless given.
  ucx=""
  IFS=',' read -ra devs <<<"$hca"
  for d in "${devs[@]}"; do
    d="${d#=}"
    [[ "$d" == *:* ]] || d="$d:1"
    ucx="${ucx:+$ucx,}$d"
  done
  export UCX_NET_DEVICES="$ucx"
fi
# Pass the network and CUDA settings, and the paths burnin needs, to every rank.
while IFS='=' read -r name _; do
  case "$name" in NCCL_* | UCX_* | CUDA_* | BURNIN_*) env_args+=(-x "$name") ;; esac
done < <(env)
env_args+=(-x PATH)
[ -z "${LD_LIBRARY_PATH:-}" ] || env_args+=(-x LD_LIBRARY_PATH)

# The node's own mpirun (Open MPI, HPC-X) when it has one; else, from the release
# tarball, its bundled Open MPI (bin/burnin-mpirun; BURNIN_MPI=bundled asks for it).
mpirun="${MPIRUN:-}"
if [ -z "$mpirun" ]; then
  if [ "${BURNIN_MPI:-auto}" != bundled ] && command -v mpirun >/dev/null; then
    mpirun=mpirun
  elif [ -x "$top/bin/burnin-mpirun" ]; then
    mpirun="$top/bin/burnin-mpirun"
  else
    die "no mpirun on PATH (load the cluster's Open MPI or HPC-X, or use the release tarball: its bin/burnin-mpirun is a bundled Open MPI)"
  fi
fi
cmd=("$mpirun" --hostfile "$hostfile" -np "$np" --map-by "ppr:$gpus:node" --bind-to none
  "${env_args[@]}")
if [ -n "$nic" ]; then
  cmd+=(--mca btl_tcp_if_include "$nic" --mca oob_tcp_if_include "$nic")
fi
[ "$(id -u)" != 0 ] || cmd+=(--allow-run-as-root)
# After --: burnin's arguments, or (as `burnin run --launch '... --'` appends them) a
# program with its arguments: burnin run's own binary and its phase.
if [ -x "$1" ] && [ -f "$1" ]; then
  cmd+=("$@")
else
  cmd+=("$burnin" "$@")
fi

printf 'mpirun-hostfile: %d node(s) x %d GPU(s) = %d ranks\n' "$nodes" "$gpus" "$np" >&2
printf 'mpirun-hostfile: %s\n' "${cmd[*]@Q}" >&2
[ "$dry" = 1 ] || exec "${cmd[@]}"
