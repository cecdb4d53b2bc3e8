#!/usr/bin/env bash
# Open MPI's launcher agent (plm_rsh_agent) for the hosts of scripts/hosts.sh: called as ssh would
# be, `hosts_agent.sh ADDRESS COMMAND...`, it runs COMMAND (orted, which then starts the ranks) in
# the namespaces of the host with that address. It wraps the daemon, never a rank: a rank's
# wrapper would outlive it, and mpirun's teardown would leave orphans.
set -euo pipefail

address=${1:?"usage: hosts_agent.sh ADDRESS COMMAND..."}
shift
base=/run/ember-hosts
for addresses in "$base"/*/addresses; do
  [ -e "$addresses" ] || continue
  read -r host netns < <(awk -v a="$address" '$1 == a { print $2, $3 }' "$addresses") || true
  if [ -n "${host:-}" ]; then
    dir=$(dirname "$addresses")/$host
    exec nsenter --net="/var/run/netns/$netns" --mount="$dir/mnt" --uts="$dir/uts" -- /bin/sh -c "$*"
  fi
done
echo "hosts_agent.sh: no host has address $address (scripts/hosts.sh up makes them)" >&2
exit 1
