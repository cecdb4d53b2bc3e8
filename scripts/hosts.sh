#!/usr/bin/env bash
# Hosts on one machine, for the multi-host tests (docs/distributed.md, "Hosts on one machine"):
# each host is a persistent set of Linux namespaces — network, mount and UTS — entered with
# nsenter, joined to the others by a veth pair on a bridge of the set's own, on a /24 of the
# caller's choosing. A host has its own hostname, its own /tmp and /dev/shm (tmpfs), and so its
# own data and checkpoint folders: nothing is shared with another host by accident. A host's only
# route is its subnet: no default route, no other destination.
#
#   scripts/hosts.sh check                     exit 0 if this machine can make hosts, else 77 and why
#   scripts/hosts.sh up SET COUNT SUBNET [PATH...]
#                                              e.g. up h2 2 10.231.2: hosts 10.231.2.2, .3, … on a
#                                              bridge at 10.231.2.1 (a SET is at most 6 characters);
#                                              each PATH under /tmp (a build, a source tree) stays
#                                              visible in the hosts, whose /tmp is their own
#   scripts/hosts.sh down SET                  removes every trace of SET (safe to repeat)
#   scripts/hosts.sh exec SET INDEX CMD...     runs CMD inside host INDEX
#   scripts/hosts.sh hostfile SET              Open MPI's host file: one slot per host
#   scripts/hosts.sh mpirun SET MPIRUN_ARGS... mpirun with the options these hosts need (below)
#
# Open MPI starts its daemons inside the hosts through scripts/hosts_agent.sh (plm_rsh_agent), which
# enters the named host's namespaces around orted; the ranks are orted's children there.
set -euo pipefail

base=/run/ember-hosts
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() {
  echo "hosts.sh: $*" >&2
  exit 2
}

netns_of() { echo "ember-$1-h$2"; }
launcher_of() { echo "ember-$1-l"; }

# A new network namespace NETNS on BRIDGE: its eth0 (the veth pair's far end; the near end is
# VETH, on the bridge) at ADDRESS/24, and no other route.
join_bridge() {  # join_bridge NETNS VETH BRIDGE ADDRESS
  ip netns add "$1"
  ip link add "$2" type veth peer name eth0 netns "$1"
  ip link set "$2" master "$3" up
  ip -n "$1" addr add "$4/24" dev eth0
  ip -n "$1" link set eth0 up
  ip -n "$1" link set lo up
}

cmd=${1:-}
case "$cmd" in
check)
  # The tests skip (77) with the reason where the machine cannot make namespaces.
  [ "$(id -u)" = 0 ] || { echo "hosts.sh: skipped: needs root (network and mount namespaces)"; exit 77; }
  for tool in ip nsenter unshare mountpoint; do
    command -v "$tool" >/dev/null || { echo "hosts.sh: skipped: $tool not found (Debian: iproute2, util-linux)"; exit 77; }
  done
  probe="ember-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "hosts.sh: skipped: cannot create a network namespace here (ip netns add failed)"
    exit 77
  fi
  ip netns del "$probe"
  unshare --mount --uts true 2>/dev/null || { echo "hosts.sh: skipped: cannot create mount and UTS namespaces"; exit 77; }
  ;;
up)
  [ $# -ge 4 ] || die "usage: hosts.sh up SET COUNT SUBNET [PATH...] (e.g. up h2 2 10.231.2)"
  set_name=$2 count=$3 subnet=$4
  shift 4
  # The paths under /tmp that the hosts must still see, bound back over their own /tmp.
  keep=""
  for path in "$@"; do
    path=$(realpath -m "$path")
    case "$path" in /tmp/*) keep="$keep $path" ;; esac
  done
  [[ $set_name =~ ^[a-z0-9]{1,6}$ ]] || die "SET must be 1 to 6 lowercase letters or digits (interface names are short), got '$set_name'"
  [[ $count =~ ^[0-9]+$ && $count -ge 1 && $count -le 200 ]] || die "COUNT must be 1 to 200, got '$count'"
  [[ $subnet =~ ^10\.[0-9]+\.[0-9]+$ ]] || die "SUBNET must be the first three numbers of a private 10.x.y.0/24, got '$subnet'"
  dir=$base/$set_name
  [ ! -e "$dir" ] || die "set '$set_name' exists already (scripts/hosts.sh down $set_name)"
  mkdir -p "$base"
  # A persistent mount namespace is a bind mount of /proc/PID/ns/mnt; its folder must not
  # propagate mounts, or the namespace would hold a reference to itself.
  mountpoint -q "$base" || { mount --bind "$base" "$base" && mount --make-private "$base"; }
  mkdir -p "$dir"
  bridge="eb-$set_name"
  ip link add "$bridge" type bridge
  ip addr add "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  : >"$dir/addresses"
  for ((i = 0; i < count; i++)); do
    host=$dir/h$i netns=$(netns_of "$set_name" "$i") address="$subnet.$((i + 2))"
    mkdir -p "$host"
    touch "$host/mnt" "$host/uts"
    join_bridge "$netns" "ev-$set_name-$i" "$bridge" "$address"
    nsenter --net="/var/run/netns/$netns" unshare --mount="$host/mnt" --uts="$host/uts" --propagation private \
      sh -c "hostname $set_name-h$i && n=0 && for p in $keep; do n=\$((n + 1)); mkdir -p $host/keep/\$n &&
               mount --bind \$p $host/keep/\$n; done && mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs /dev/shm &&
             n=0 && for p in $keep; do n=\$((n + 1)); mkdir -p \$p && mount --bind $host/keep/\$n \$p; done"
    echo "$address h$i $netns" >>"$dir/addresses"
  done
  # mpirun's own network namespace on the bridge (hosts.sh mpirun runs it there), whose TCP gives
  # up on an unacknowledged send after 3 retries, about 3 s, instead of the machine's 15 (a quarter
  # of an hour): when a host is cut off, mpirun learns that its daemon is lost and ends the job.
  launcher=$(launcher_of "$set_name")
  join_bridge "$launcher" "ev-$set_name-l" "$bridge" "$subnet.254"
  ip netns exec "$launcher" sh -c "echo 3 >/proc/sys/net/ipv4/tcp_retries2"  # not sysctl: procps may be absent
  ;;
down)
  [ $# -eq 2 ] || die "usage: hosts.sh down SET"
  set_name=$2 dir=$base/$2
  # Processes still in the hosts (a daemon whose launcher lost it, a rank a test left behind).
  for netns in $(ip netns list 2>/dev/null | awk -v p="ember-$set_name-h" 'index($1, p) == 1 { print $1 }'); do
    pids=$(ip netns pids "$netns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
  for host in "$dir"/h*; do
    [ -d "$host" ] || continue
    i=${host##*/h}
    umount "$host/mnt" 2>/dev/null || true
    umount "$host/uts" 2>/dev/null || true
    ip netns del "$(netns_of "$set_name" "$i")" 2>/dev/null || true
  done
  # Namespaces whose folder is gone (an interrupted up), and the launcher's.
  for netns in $(ip netns list 2>/dev/null | awk -v p="ember-$set_name-h" 'index($1, p) == 1 { print $1 }'); do
    ip netns del "$netns" 2>/dev/null || true
  done
  launcher=$(launcher_of "$set_name")
  pids=$(ip netns pids "$launcher" 2>/dev/null || true)
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  ip netns del "$launcher" 2>/dev/null || true
  ip link del "eb-$set_name" 2>/dev/null || true
  rm -rf "$dir"
  ;;
exec)
  [ $# -ge 4 ] || die "usage: hosts.sh exec SET INDEX CMD..."
  set_name=$2 i=$3
  shift 3
  host=$base/$set_name/h$i
  [ -e "$host/mnt" ] || die "no host $i in set '$set_name' (scripts/hosts.sh up first)"
  exec nsenter --net="/var/run/netns/$(netns_of "$set_name" "$i")" --mount="$host/mnt" --uts="$host/uts" -- "$@"
  ;;
hostfile)
  [ $# -eq 2 ] || die "usage: hosts.sh hostfile SET"
  awk '{ print $1 " slots=1" }' "$base/$2/addresses"
  ;;
mpirun)
  [ $# -ge 2 ] || die "usage: hosts.sh mpirun SET MPIRUN_ARGS..."
  set_name=$2
  shift 2
  subnet=$(awk 'NR == 1 { split($1, a, "."); print a[1] "." a[2] "." a[3] ".0/24" }' "$base/$set_name/addresses")
  hostfile=$base/$set_name/hostfile
  "$0" hostfile "$set_name" >"$hostfile"
  # The daemons start through the agent, each straight from mpirun (no tree: a host cannot start
  # another's); Open MPI's out-of-band channel and its TCP transport use the set's subnet only (by
  # default mpirun advertises this machine's own interface, which the hosts cannot reach); ranks
  # talk over TCP and nothing else (no shared memory, no UCX), and yield when idle, since ranks
  # may outnumber the cores.
  # From the launcher's namespace (above), in this machine's mount namespace, where the agent
  # finds the hosts' namespaces.
  exec nsenter --net="/var/run/netns/$(launcher_of "$set_name")" -- mpirun --hostfile "$hostfile" --bind-to none \
    --mca plm_rsh_agent "$here/hosts_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$subnet" --mca btl_tcp_if_include "$subnet" \
    --mca pml ob1 --mca btl tcp,self --mca mpi_yield_when_idle 1 "$@"
  ;;
*)
  die "usage: hosts.sh check | up SET COUNT SUBNET | down SET | exec SET INDEX CMD... | hostfile SET | mpirun SET ARGS..."
  ;;
esac
