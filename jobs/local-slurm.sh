#!/usr/bin/env bash
# A real multi-node Slurm cluster on this host, for tests and trials: munge, MariaDB on a private
# datadir and port, slurmdbd (so sacct works as on real sites), slurmctld and four slurmd (n1..n4).
#
#   jobs/local-slurm.sh up       install what is missing (root), write configs, start what is stopped
#   jobs/local-slurm.sh status   show daemons and nodes; exit 0 only when the whole cluster is up
#   jobs/local-slurm.sh down     cancel jobs, stop every daemon it started; state stays on disk
#
# Everything lives under MOE_SLURM_DIR (default /var/tmp/moe-slurm). /etc/slurm/slurm.conf is linked
# to the generated one so that sbatch, srun, squeue and sacct work without extra environment (unless
# it links to another cluster's: then export SLURM_CONF as the script says). MOE_SLURM_PORT (default
# 17000) is the first of the ports it uses (+1..+4 the nodes, +19 slurmdbd, +30 MariaDB), so a second
# cluster can run beside the first with its own directory and ports.
#
# Two partitions share the four nodes. `debug` (the default) has their whole advertised size, 2 CPUs a
# node, for tests of placement and faults. `bench` is for measurements (conf/cluster/local-slurm.yaml):
# its QOS grants at most as many CPUs at once, over all its jobs, as this host has cores (nproc), and
# refuses a job that asks for more, so a sweep through it never runs more ranks than there are cores.
# (Four nodes cannot each advertise a CPU of their own on a host with fewer than four cores.)
set -euo pipefail

STATE=${MOE_SLURM_DIR:-/var/tmp/moe-slurm}
CLUSTER=moe
NODES=(n1 n2 n3 n4)
NODE_CPUS=${MOE_SLURM_NODE_CPUS:-2}
HOST_CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc would count OpenMP's threads
BENCH_QOS=moe-host-cores
PORT=${MOE_SLURM_PORT:-17000}
CTLD_PORT=$PORT
NODE_PORTS=$((PORT + 1))-$((PORT + ${#NODES[@]}))
DBD_PORT=$((PORT + 19))
DB_PORT=$((PORT + 30))
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
ETC_LINK=/etc/slurm/slurm.conf
export SLURM_CONF=$STATE/etc/slurm.conf
CONFIG_CHANGED=0

die() {
  echo "local-slurm: $*" >&2
  exit 1
}

# Poll a command until it succeeds; fail with the log to look at after $2 tenths of a second.
wait_for() {
  local what=$1 tenths=$2 log=$3
  shift 3
  for ((i = 0; i < tenths; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "$what did not come up; see $log"
}

pid_alive() {
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  [[ $EUID -eq 0 ]] || die "installing ${missing[*]} needs root"
  echo "local-slurm: installing ${missing[*]}"
  # Keep the packages from starting system-wide daemons (MariaDB on 3306, munged): this cluster runs
  # its own. A policy-rc.d already in place (as in most containers) is left as it is.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# /etc/slurm/slurm.conf may point here: when it is missing, already ours, or a link to a cluster whose
# slurmctld is not running (a live cluster's link is left alone).
link_is_free() {
  [[ ! -e $ETC_LINK && ! -L $ETC_LINK ]] && return 0
  [[ -L $ETC_LINK ]] || return 1
  local linked
  linked=$(readlink "$ETC_LINK")
  [[ $linked == "$STATE/etc/slurm.conf" ]] || ! pid_alive "${linked%/etc/slurm.conf}/run/slurmctld.pid"
}

write_configs() {
  mkdir -p "$STATE"/{etc,run,log,ctld,db} "${NODES[@]/#/$STATE/spool/}"
  local host
  host=$(hostname -s)
  cat >"$STATE/etc/slurm.conf.new" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=300
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=limits
NodeName=n[1-4] NodeHostname=$host NodeAddr=127.0.0.1 Port=$NODE_PORTS CPUs=$NODE_CPUS RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
PartitionName=bench Nodes=n[1-4] QOS=$BENCH_QOS MaxTime=INFINITE State=UP
EOF
  if cmp -s "$STATE/etc/slurm.conf.new" "$STATE/etc/slurm.conf"; then
    rm "$STATE/etc/slurm.conf.new"
  else
    mv "$STATE/etc/slurm.conf.new" "$STATE/etc/slurm.conf"
    CONFIG_CHANGED=1
  fi
  (
    umask 077
    cat >"$STATE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  )
  # Node names must resolve, as on real sites: jobs rendezvous at their first node's name.
  grep -qE "^127\.0\.0\.1[[:space:]]+${NODES[*]}\$" /etc/hosts || echo "127.0.0.1 ${NODES[*]}" >>/etc/hosts
  if link_is_free; then
    mkdir -p "$(dirname "$ETC_LINK")"
    ln -sfn "$STATE/etc/slurm.conf" "$ETC_LINK"
  else
    echo "local-slurm: $ETC_LINK is not this cluster's; export SLURM_CONF=$SLURM_CONF to use it" >&2
  fi
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  [[ -s /etc/munge/munge.key ]] || mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  mkdir -p /run/munge
  chown munge:munge /run/munge
  su -s /bin/sh munge -c munged
  wait_for munged 50 /var/log/munge/munged.log sh -c 'munge -n | unmunge'
}

db() {
  mariadb --socket="$STATE/run/mysqld.sock" -u root "$@"
}

start_mariadb() {
  if ! pid_alive "$STATE/run/mysqld.pid"; then
    if [[ ! -d $STATE/db/mysql ]]; then
      mariadb-install-db --user=root --datadir="$STATE/db" --auth-root-authentication-method=socket \
        >"$STATE/log/mariadb-install.log" 2>&1
    fi
    (
      umask 022
      setsid mariadbd --user=root --datadir="$STATE/db" --socket="$STATE/run/mysqld.sock" \
        --pid-file="$STATE/run/mysqld.pid" --port="$DB_PORT" --bind-address=127.0.0.1 \
        --skip-name-resolve --log-error="$STATE/log/mariadb.log" </dev/null >/dev/null 2>&1 &
    )
    wait_for mariadbd 300 "$STATE/log/mariadb.log" db -e 'SELECT 1'
  fi
  db -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
  pid_alive "$STATE/run/slurmdbd.pid" || slurmdbd
  wait_for slurmdbd 300 "$STATE/log/slurmdbd.log" sacctmgr -n show cluster
  if [[ -z $(sacctmgr -n -P show cluster "$CLUSTER" format=cluster) ]]; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
  # The bench partition's QOS: this host's cores, in all and per job (a larger job is refused).
  if [[ -z $(sacctmgr -n -P show qos "$BENCH_QOS" format=name) ]]; then
    sacctmgr -i add qos "$BENCH_QOS" >/dev/null
  fi
  sacctmgr -i modify qos "$BENCH_QOS" set GrpTRES=cpu="$HOST_CORES" MaxTRESPerJob=cpu="$HOST_CORES" \
    Flags=DenyOnLimit >/dev/null
}

start_slurm() {
  pid_alive "$STATE/run/slurmctld.pid" || slurmctld
  wait_for slurmctld 300 "$STATE/log/slurmctld.log" scontrol ping
  for n in "${NODES[@]}"; do
    pid_alive "$STATE/run/slurmd-$n.pid" || slurmd -N "$n"
  done
  wait_for "the nodes" 300 "$STATE/log/slurmd-n1.log" nodes_ready
}

# True when every node is schedulable (idle, mixed or allocated; not down, drained or unknown).
nodes_ready() {
  local states
  states=$(sinfo -h -N -o '%T' | sort -u)
  [[ -n $states ]] && ! grep -qvE '^(idle|mixed|allocated)$' <<<"$states"
}

# Stop the daemons of these pid files together (SIGTERM, then SIGKILL after ten seconds).
stop_pids() {
  local pids=()
  for pidfile in "$@"; do
    pid_alive "$pidfile" && pids+=("$(cat "$pidfile")")
  done
  ((${#pids[@]} == 0)) && return 0
  kill "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    local alive=()
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive+=("$pid"); fi
    done
    ((${#alive[@]} == 0)) && return 0
    sleep 0.1
  done
  kill -9 "${alive[@]}" 2>/dev/null || true
}

cmd_up() {
  install_missing
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  # slurmctld reads some settings (AccountingStorageEnforce, which the bench QOS needs) only when it
  # starts: a running one restarts on a changed slurm.conf. Its jobs survive (state on disk).
  if ((CONFIG_CHANGED)) && pid_alive "$STATE/run/slurmctld.pid"; then
    stop_pids "$STATE/run/slurmctld.pid"
  fi
  start_slurm
  # Daemons that were already running read a changed slurm.conf only when told to.
  if ((CONFIG_CHANGED)); then scontrol reconfigure; fi
  echo "local-slurm: up ($STATE)"
}

cmd_down() {
  if pid_alive "$STATE/run/slurmctld.pid"; then
    local jobs
    jobs=$(squeue -h -o %A)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086  # one job id per word
      scancel $jobs
      for ((i = 0; i < 200; i++)); do
        [[ -z $(squeue -h -o %A) ]] && break
        sleep 0.1
      done
    fi
  fi
  local slurmds=("${NODES[@]/#/$STATE/run/slurmd-}")
  stop_pids "${slurmds[@]/%/.pid}"
  stop_pids "$STATE/run/slurmctld.pid"
  stop_pids "$STATE/run/slurmdbd.pid"
  stop_pids "$STATE/run/mysqld.pid"
  # munged serves every cluster on this host (MOE_SLURM_DIR): stopped with the last one.
  pgrep -x slurmctld >/dev/null || stop_pids /run/munge/munged.pid
  echo "local-slurm: down"
}

cmd_status() {
  local ok=0
  for d in slurmctld slurmdbd mysqld "${NODES[@]/#/slurmd-}"; do
    if pid_alive "$STATE/run/$d.pid"; then
      echo "$d: running (pid $(cat "$STATE/run/$d.pid"))"
    else
      echo "$d: stopped"
      ok=1
    fi
  done
  if ((ok == 0)); then
    sinfo -N -p debug -o '%N %T %c' || ok=1
    nodes_ready || ok=1
    # A cluster brought up by an older version of this script has no bench partition: not ready.
    local qos cap
    qos=$(scontrol -o show partition bench 2>/dev/null | grep -o 'QoS=[^ ]*' || true)
    cap=$(sacctmgr -n -P show qos "$BENCH_QOS" format=GrpTRES 2>/dev/null || true)
    if [[ $qos == "QoS=$BENCH_QOS" && $cap == "cpu=$HOST_CORES" ]]; then
      echo "bench partition: at most $HOST_CORES CPUs at once (the host's cores)"
    else
      echo "bench partition: missing or not capped at the host's $HOST_CORES cores (${qos:-no partition}, ${cap:-no QOS}); run: jobs/local-slurm.sh up"
      ok=1
    fi
  fi
  return "$ok"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*) die "unknown command '${1:-}'; allowed: up, down, status" ;;
esac
