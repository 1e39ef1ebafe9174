#!/usr/bin/env bash
# Starts a one-node Slurm cluster on this Debian machine (root), so that `srun` can start txl's
# data-parallel jobs here as it would on a real cluster:
#   tools/slurm_local.sh
#   srun --ntasks 2 --cpus-per-task 1 build/bin/txl-train --config experiments/kjv_base.yaml
#   build/bin/distributed_test --gtest_filter=DataParallel.SrunStartsAJob   # skips without a cluster
# Installs munge, slurmctld and slurmd if missing, writes /etc/slurm/slurm.conf for this host (a
# node with this machine's cores, one partition) unless one exists, and starts the daemons.
# Stop them with: pkill slurmd; pkill slurmctld; pkill munged
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "slurm_local.sh: must run as root" >&2; exit 1; }
if ! command -v slurmd > /dev/null || ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmd slurmctld slurm-client munge
fi
host="$(hostname)"
cpus="$(nproc)"
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2> /dev/null
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
chown munge:munge /run/munge
if [ ! -f /etc/slurm/slurm.conf ]; then
  cat > /etc/slurm/slurm.conf << EOF
ClusterName=txl-local
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmUser=root
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
fi
pgrep -x munged > /dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld > /dev/null || slurmctld
pgrep -x slurmd > /dev/null || slurmd
for _ in $(seq 1 20); do
  if sinfo -h -o %T 2> /dev/null | grep -q idle; then
    sinfo
    exit 0
  fi
  sleep 0.5
done
echo "slurm_local.sh: the node did not come up; see /var/log/slurm/" >&2
exit 1
