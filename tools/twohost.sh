#!/usr/bin/env bash
# twohost.sh: two hosts without shared memory, simulated on this machine, for
# tests and benchmarks of multi-host runs (issue 15 item 7, issue 22 item 1).
#
#   tools/twohost.sh run  [OPTIONS] -- CMD [ARGS...]   up, CMD on host 1, down
#   tools/twohost.sh up   [OPTIONS]                    make the two hosts
#   tools/twohost.sh exec [--name N] [--hide DIR] -- CMD [ARGS...]
#                                                      CMD on host 1 of hosts made by up
#   tools/twohost.sh down [--name N]                   remove them (and what runs there)
#   tools/twohost.sh link [--name N]                   the raw TCP rate from host 2 to
#                                                      host 1 of hosts made by up (also
#                                                      from inside CMD of run or exec)
#   tools/twohost.sh check                             exit 0 if this machine can make
#                                                      them, else print why and exit 77
#
#   OPTIONS  --name N     names the pair (default twohost): the hosts are N-1 and N-2,
#                         so several pairs can exist at once (tests use a unique N)
#            --rate R     limit each direction of the link to R (tc tbf: 1gbit,
#                         100mbit, 10gbit); default: the veth pair's own speed
#            --slots K    K ranks per host in the hostfile (default 1): 2 hosts x K
#            --btl LIST   Open MPI's transports (default self,tcp: no shared memory,
#                         even between two ranks of one host; self,vader,tcp lets
#                         the ranks of one host use shared memory as on a cluster)
#            --hide DIR   (run, exec) on host 2, DIR is an empty tmpfs of its own:
#                         a folder that host 1 sees and host 2 does not, as when a
#                         checkpoint folder is a local disk rather than shared
#
# A host is a network namespace with its own host name (a UTS namespace in
# which hostname is N-1 or N-2), joined to the other by a veth pair:
# N-1 is 10.77.0.1/24, N-2 is 10.77.0.2/24, each name in the other's
# /etc/hosts (/etc/netns/N-k/hosts, which ip netns exec puts over /etc/hosts).
# Both hosts see this machine's file system: the same paths, the same build.
#
# CMD runs on host 1 with this environment, so that 'mpirun' or 'engine-run
# --hostfile "$TWOHOST_HOSTFILE"' starts ranks on both hosts:
#   TWOHOST_HOSTFILE               "N-1 slots=K" and "N-2 slots=K"
#   OMPI_MCA_plm_rsh_agent         this script's 'agent': Open MPI calls it as it
#                                  would call ssh, 'agent HOST COMMAND...', and it
#                                  runs COMMAND inside HOST's namespaces through
#                                  'ip netns exec', with a fresh environment as an
#                                  ssh login has (PATH, HOME, LD_LIBRARY_PATH, the
#                                  OMPI_MCA_* settings below and the sanitizers'
#                                  ASAN/LSAN/UBSAN_OPTIONS and LD_PRELOAD (the
#                                  sanitizer run's keep_modules.so,
#                                  tools/test_sanitize.sh), as a cluster's ssh
#                                  would pass with SendEnv; nothing else: what the
#                                  ranks need must come through mpirun -x)
#   OMPI_MCA_btl                   self,tcp (--btl)
#   OMPI_MCA_btl_tcp_if_include    10.77.0.0/24: ranks talk over the veth link
#   OMPI_MCA_oob_tcp_if_include    10.77.0.0/24: and so do mpirun and its daemons
# mpirun may print "plm:rsh: Warning: setpgid(...) failed in parent with
# errno=Permission denied(13)" as it starts host 2's daemon: Open MPI's own
# race (the child had already exec'd the agent), harmless, seen with ssh too.
# mpirun's own --bind-to none is needed too (engine-run passes it): each
# host's daemon would otherwise bind its first rank to core 0, the same core
# for both hosts, which halves compute and looks like a slow network.
#
# 'link' prints one line, "link: 117.9 MB/s raw TCP (236 MB in 2.00 s), 0.94
# Gbit/s; the machine 0.24 cores busy meanwhile, 2.2 ms of CPU per MB": 2 s
# of 64 KiB writes from host 2 to host 1 over one TCP connection (port 5299),
# counted by the receiver from its first byte to EOF, so that a benchmark's
# numbers can be set against the link it ran on. The CPU figure is the whole
# machine's (/proc/stat) over that time: the two hosts are this machine's
# cores, so what the TCP stack spends on both ends of the link (and the
# rate limit's qdisc) is taken from the cores the ranks compute on, which
# hosts of their own would not share.
#
# 'run' always removes what it made (a trap on exit and on signals), also
# when CMD fails or the script is interrupted; its exit status is CMD's.
# 'up' that fails half-way removes what it made; 'down' kills what still runs
# inside the two namespaces (by process id, from ip netns pids) first.
#
# Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN), ip (iproute2), unshare
# (util-linux) and, for --rate, tc. Errors: one line "twohost: ..." on
# stderr and exit 1 (2 for a bad command line; 77 from 'check').
#
# Example: two hosts at 1 Gbit/s, one rank each, a training run across them:
#   tools/twohost.sh run --rate 1gbit -- sh -c \
#     'build/bin/engine-run --np 2 --hostfile "$TWOHOST_HOSTFILE" --config c.json train_cls ...'
set -u

SELF=$(readlink -f "$0")
SUBNET=10.77.0.0/24
ADDR1=10.77.0.1
ADDR2=10.77.0.2

die() {
  echo "twohost: $*" >&2
  exit 1
}
usage_error() {
  echo "twohost: $* (see the top of $SELF)" >&2
  exit 2
}

# Why this machine cannot make the hosts, or nothing when it can.
why_not() {
  command -v ip >/dev/null || { echo "no 'ip' command (Debian package iproute2)"; return; }
  command -v unshare >/dev/null || { echo "no 'unshare' command (util-linux)"; return; }
  command -v hostname >/dev/null || { echo "no 'hostname' command"; return; }
  local probe="twohost-probe-$$" err who=""
  [ "$(id -u)" -eq 0 ] || who="not root: "
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "${who}cannot create a network namespace (needs CAP_SYS_ADMIN): $err"
    return
  fi
  if ! err=$(ip netns exec "$probe" unshare --uts --mount true 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot enter a network namespace with its own host name and mounts: $err"
    return
  fi
  ip netns del "$probe"
}

# ---- options ---------------------------------------------------------------

NAME=twohost
RATE=""
SLOTS=1
BTL=self,tcp
HIDE=""
CMD_START=0 # index of CMD in "$@" after --

parse_opts() {
  local allowed=$1
  shift
  local i=0
  while [ $# -gt 0 ]; do
    i=$((i + 1))
    case $1 in
    --) CMD_START=$((i + 1)); return ;;
    --name | --rate | --slots | --btl | --hide)
      case " $allowed " in *" $1 "*) ;; *) usage_error "$1 is not an option of this subcommand" ;; esac
      [ $# -ge 2 ] || usage_error "$1 needs a value"
      case $1 in
      --name) NAME=$2 ;;
      --rate) RATE=$2 ;;
      --slots) SLOTS=$2 ;;
      --btl) BTL=$2 ;;
      --hide) HIDE=$2 ;;
      esac
      shift 2
      i=$((i + 1))
      ;;
    *) usage_error "unknown argument '$1'" ;;
    esac
  done
  # a name both namespace and host name can carry (hostnames: 64 bytes)
  [[ $NAME =~ ^[A-Za-z][A-Za-z0-9-]{0,39}$ ]] ||
    usage_error "--name '$NAME': 1-40 letters, digits and '-', starting with a letter"
  [[ $SLOTS =~ ^[1-9][0-9]{0,2}$ ]] || usage_error "--slots '$SLOTS': a whole number from 1 to 999"
  [[ -z $RATE || $RATE =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$ ]] ||
    usage_error "--rate '$RATE': a number with bit, kbit, mbit or gbit (1gbit, 100mbit)"
  [[ $BTL =~ ^[a-z,]+$ ]] || usage_error "--btl '$BTL': a comma-separated list (self,tcp)"
  if [ -n "$HIDE" ]; then
    [ "${HIDE#/}" != "$HIDE" ] || usage_error "--hide '$HIDE': an absolute path"
    [ -d "$HIDE" ] || usage_error "--hide '$HIDE': not a folder"
  fi
}

host1() { echo "$NAME-1"; }
host2() { echo "$NAME-2"; }
state_dir() { echo "/run/twohost/$NAME"; }

# ---- up / down ---------------------------------------------------------------

# tc tbf for RATE: the bucket holds 10 ms at the rate (at least 64 KiB), so
# the kernel's timer (1-4 ms) never empties it before it refills.
limit_rate() {
  local ns=$1 bits
  bits=$(awk -v r="$RATE" 'BEGIN {
    n = r + 0; u = substr(r, length(n "") + 1)
    m = u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : u == "kbit" ? 1e3 : 1
    printf "%.0f", n * m }')
  local burst=$((bits / 8 / 100))
  [ "$burst" -ge 65536 ] || burst=65536
  ip -n "$ns" link set eth0 txqueuelen 1000 &&
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst "$burst" latency 50ms
}

do_up() {
  local why h1 h2 dir
  why=$(why_not)
  [ -z "$why" ] || die "cannot make two hosts here: $why"
  h1=$(host1)
  h2=$(host2)
  dir=$(state_dir)
  [ ! -e "/run/netns/$h1" ] && [ ! -e "/run/netns/$h2" ] ||
    die "hosts $h1 and $h2 exist already (tools/twohost.sh down --name $NAME removes them)"
  # from here on, a failure removes what was made
  trap 'do_down >/dev/null 2>&1' EXIT
  ip netns add "$h1" && ip netns add "$h2" || die "cannot create the namespaces $h1 and $h2"
  # each end made inside its namespace: no interface name is taken on this host
  ip link add eth0 netns "$h1" type veth peer name eth0 netns "$h2" ||
    die "cannot create the veth pair between $h1 and $h2"
  ip -n "$h1" addr add "$ADDR1/24" dev eth0 && ip -n "$h2" addr add "$ADDR2/24" dev eth0 ||
    die "cannot give the veth ends their addresses"
  local ns
  for ns in "$h1" "$h2"; do
    ip -n "$ns" link set lo up && ip -n "$ns" link set eth0 up || die "cannot bring up $ns's links"
    if [ -n "$RATE" ]; then
      command -v tc >/dev/null || die "--rate needs tc (Debian package iproute2)"
      limit_rate "$ns" || die "cannot limit $ns's link to $RATE"
    fi
    mkdir -p "/etc/netns/$ns" &&
      printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$ADDR1" "$h1" "$ADDR2" "$h2" \
        >"/etc/netns/$ns/hosts" || die "cannot write /etc/netns/$ns/hosts"
  done
  mkdir -p "$dir" &&
    printf '%s slots=%s\n%s slots=%s\n' "$h1" "$SLOTS" "$h2" "$SLOTS" >"$dir/hostfile" &&
    printf '%s\n' "$BTL" >"$dir/btl" || die "cannot write $dir"
  trap - EXIT
  echo "twohost: $h1 ($ADDR1) and $h2 ($ADDR2), ${RATE:-unlimited} link, $SLOTS slot(s) each; hostfile $dir/hostfile"
}

# Remove everything 'up' made for NAME; what is not there is fine.
do_down() {
  local ns pids p
  for ns in "$(host1)" "$(host2)"; do
    [ -e "/run/netns/$ns" ] || continue
    # what still runs in there (a daemon left by a failed mpirun): by id
    pids=$(ip netns pids "$ns" 2>/dev/null)
    if [ -n "$pids" ]; then
      for p in $pids; do kill -TERM "$p" 2>/dev/null; done
      sleep 0.5
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    fi
    ip netns del "$ns" 2>/dev/null
  done
  for ns in "$(host1)" "$(host2)"; do rm -rf "/etc/netns/$ns"; done
  rm -rf "$(state_dir)"
  rmdir /run/twohost /etc/netns 2>/dev/null # only when empty: others may use them
  return 0
}

# ---- on a host -----------------------------------------------------------------

# CMD on host 1 with the environment the top of this file lists.
do_exec() {
  local h1 dir
  h1=$(host1)
  dir=$(state_dir)
  [ -e "/run/netns/$h1" ] && [ -f "$dir/hostfile" ] ||
    die "no hosts named $NAME (tools/twohost.sh up --name $NAME makes them)"
  [ $# -gt 0 ] || usage_error "no CMD after --"
  export TWOHOST_NAME=$NAME TWOHOST_HOSTFILE=$dir/hostfile TWOHOST_HIDE=$HIDE
  export OMPI_MCA_plm_rsh_agent="$SELF agent"
  export OMPI_MCA_btl
  OMPI_MCA_btl=$(cat "$dir/btl")
  export OMPI_MCA_btl_tcp_if_include=$SUBNET OMPI_MCA_oob_tcp_if_include=$SUBNET
  ip netns exec "$h1" unshare --uts "$SELF" _enter "$h1" "" env -- "$@"
}

# Open MPI's plm_rsh_agent: 'agent HOST WORD...' runs the words as one shell
# command on HOST, as 'ssh HOST WORD...' does, with a login's environment.
do_agent() {
  [ $# -ge 2 ] || die "agent: expected HOST COMMAND..., got '$*'"
  [ -n "${TWOHOST_NAME:-}" ] ||
    die "agent: TWOHOST_NAME is not set: start mpirun through 'tools/twohost.sh exec' or 'run'"
  local host=$1 hide=""
  shift
  case $host in
  "$TWOHOST_NAME-1") ;;
  "$TWOHOST_NAME-2") hide=${TWOHOST_HIDE:-} ;;
  *) die "agent: no host '$host' (the hosts are $TWOHOST_NAME-1 and $TWOHOST_NAME-2)" ;;
  esac
  exec ip netns exec "$host" unshare --uts --mount --propagation private \
    "$SELF" _enter "$host" "$hide" login -- "$*"
}

# Inside the namespaces: the host name, the hidden folder, then the command.
do_enter() {
  local host=$1 hide=$2 how=$3
  shift 4 # host, hide, how, --
  hostname "$host" || die "cannot set the host name $host"
  if [ -n "$hide" ]; then
    mount -t tmpfs -o size=1m twohost-hidden "$hide" || die "cannot hide $hide on $host"
  fi
  if [ "$how" = env ]; then
    exec "$@"
  fi
  # a login's environment: what an ssh session would have, nothing else
  local keep=(PATH="$PATH" HOME="${HOME:-/root}")
  [ -n "${LD_LIBRARY_PATH:-}" ] && keep+=(LD_LIBRARY_PATH="$LD_LIBRARY_PATH")
  local v
  for v in $(compgen -e); do
    case $v in OMPI_MCA_* | ASAN_OPTIONS | LSAN_OPTIONS | UBSAN_OPTIONS | LD_PRELOAD) keep+=("$v=${!v}") ;; esac
  done
  exec env -i "${keep[@]}" sh -c "$1"
}

# ---- the link's raw rate ------------------------------------------------------------

LINK_PY='
import os, socket, sys, time
addr = (sys.argv[2], 5299)
if sys.argv[1] == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(addr); s.listen(1); s.settimeout(15); c, _ = s.accept()
    def busy():  # CPU time of the whole machine: user nice system irq softirq
        f = open("/proc/stat").readline().split()
        return sum(int(f[i]) for i in (1, 2, 3, 6, 7))
    n = 0; t0 = None
    while True:
        b = c.recv(1 << 20)
        if not b: break
        if t0 is None: t0 = time.time(); c0 = busy()
        n += len(b)
    dt = time.time() - t0
    cpu = (busy() - c0) / os.sysconf("SC_CLK_TCK")
    print("link: %.1f MB/s raw TCP (%.0f MB in %.2f s), %.2f Gbit/s; the machine %.2f cores "
          "busy meanwhile, %.1f ms of CPU per MB"
          % (n / dt / 1e6, n / 1e6, dt, n * 8 / dt / 1e9, cpu / dt, 1e3 * cpu / (n / 1e6)))
else:
    for i in range(100):  # until the receiver listens (at most 10 s)
        try: c = socket.create_connection(addr); break
        except OSError: time.sleep(0.1)
    else: sys.exit("twohost: link: no receiver at %s:%d" % addr)
    buf = b"x" * 65536; t0 = time.time()
    while time.time() - t0 < 2.0: c.sendall(buf)
    c.close()
'

do_link() {
  local h1 h2 r
  h1=$(host1)
  h2=$(host2)
  [ -e "/run/netns/$h1" ] && [ -e "/run/netns/$h2" ] ||
    die "no hosts named $NAME (tools/twohost.sh up --name $NAME makes them)"
  command -v python3 >/dev/null || die "link: needs python3"
  ip netns exec "$h1" python3 -c "$LINK_PY" recv "$ADDR1" &
  r=$!
  ip netns exec "$h2" python3 -c "$LINK_PY" send "$ADDR1" || { kill "$r" 2>/dev/null; exit 1; }
  wait "$r" || die "link: the receiver on $h1 failed"
}

# ---- main -------------------------------------------------------------------------

[ $# -ge 1 ] || usage_error "expected a subcommand: run, up, exec, down, link, check"
sub=$1
shift
case $sub in
check)
  why=$(why_not)
  [ -z "$why" ] && exit 0
  echo "twohost: cannot make two hosts here: $why"
  exit 77
  ;;
up)
  parse_opts "--name --rate --slots --btl" "$@"
  [ "$CMD_START" -eq 0 ] || usage_error "up takes no command"
  do_up
  ;;
down)
  parse_opts "--name" "$@"
  do_down
  ;;
link)
  parse_opts "--name" "$@"
  [ "$CMD_START" -eq 0 ] || usage_error "link takes no command"
  do_link
  ;;
exec)
  parse_opts "--name --hide" "$@"
  [ "$CMD_START" -gt 0 ] || usage_error "exec needs -- CMD"
  shift $((CMD_START - 1))
  do_exec "$@"
  ;;
run)
  parse_opts "--name --rate --slots --btl --hide" "$@"
  [ "$CMD_START" -gt 0 ] || usage_error "run needs -- CMD"
  shift $((CMD_START - 1))
  do_up >&2 || exit 1
  trap 'do_down' EXIT
  # CMD in the background, so that a signal to this script runs its trap at
  # once (bash runs traps only between commands): CMD gets the signal too,
  # and down removes whatever is left
  child=""
  for sig in INT TERM HUP; do
    trap "[ -n \"\$child\" ] && kill -$sig \$child 2>/dev/null; exit \$((128 + \$(kill -l $sig)))" $sig
  done
  do_exec "$@" <&0 &
  child=$!
  wait "$child"
  exit $?
  ;;
agent) do_agent "$@" ;;
_enter) do_enter "$@" ;;
*) usage_error "unknown subcommand '$sub'" ;;
esac
