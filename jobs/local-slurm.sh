#!/usr/bin/env bash
# A real multi-node Slurm cluster on this host, for tests and trials: munge, MariaDB on a private
# datadir and port, slurmdbd (so sacct works as on real sites), slurmctld and four slurmd (n1..n4).
#
#   jobs/local-slurm.sh up       install what is missing (root), write configs, start what is stopped
#   jobs/local-slurm.sh status   show daemons and nodes; exit 0 only when the whole cluster is up
#   jobs/local-slurm.sh down     cancel jobs, stop every daemon it started; state stays on disk
#
# Everything lives under MOE_SLURM_DIR (default /var/tmp/moe-slurm). /etc/slurm/slurm.conf is linked
# to the generated one so that sbatch, srun, squeue and sacct work without extra environment.
set -euo pipefail

STATE=${MOE_SLURM_DIR:-/var/tmp/moe-slurm}
CLUSTER=moe
NODES=(n1 n2 n3 n4)
NODE_CPUS=${MOE_SLURM_NODE_CPUS:-2}
CTLD_PORT=17000
DBD_PORT=17019
DB_PORT=17030
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
NodeName=n[1-4] NodeHostname=$host NodeAddr=127.0.0.1 Port=17001-17004 CPUs=$NODE_CPUS RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
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
  if [[ -L $ETC_LINK || ! -e $ETC_LINK ]]; then
    mkdir -p "$(dirname "$ETC_LINK")"
    ln -sfn "$STATE/etc/slurm.conf" "$ETC_LINK"
  else
    echo "local-slurm: $ETC_LINK is not ours; export SLURM_CONF=$SLURM_CONF to use this cluster" >&2
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
  stop_pids /run/munge/munged.pid
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
    sinfo -N -o '%N %T %c' || ok=1
    nodes_ready || ok=1
  fi
  return "$ok"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*) die "unknown command '${1:-}'; allowed: up, down, status" ;;
esac
