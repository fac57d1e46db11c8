#!/bin/sh
# mpirun's plm_rsh_agent for netns hosts (see netns.sh): `netns_rsh.sh HOST CMD...` runs
# CMD in network namespace HOST, the way ssh would run it on a remote host.
#   mpirun --hostfile F --mca plm_rsh_agent tests/cluster/netns_rsh.sh ...
# Leading options (ssh-style flags some callers add) are skipped.
#
# The namespaces share the hostname and /tmp, so every orted would create the same OpenMPI
# session directory (/tmp/ompi.HOST.UID/jf.N) and race on it ("mkdir: File exists",
# crashes writing the shared hwloc topology). Each host gets its own session root instead.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host="$1"
shift
OMPI_MCA_orte_tmpdir_base="${TMPDIR:-/tmp}/ftb-netns-$host"
mkdir -p "$OMPI_MCA_orte_tmpdir_base"
export OMPI_MCA_orte_tmpdir_base
exec ip netns exec "$host" sh -c "$*"
