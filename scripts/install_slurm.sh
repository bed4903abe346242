#!/usr/bin/env bash
# The local Slurm of tests/integration/test_slurm.py: Debian's slurm-wlm (slurmctld, slurmd,
# sbatch), munge, and for `sacct` slurmdbd with MariaDB. The tests start and stop the daemons
# themselves (tests/integration/slurm_cluster.py); this only installs the packages.
# Run as root (CI). Does nothing when they are there; without apt or root it says so and exits
# 0, and the Slurm tests skip with that reason.
set -euo pipefail
if command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ]; then
  if [ -x /usr/sbin/slurmdbd ] && [ -x /usr/sbin/mariadbd ]; then
    exit 0
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_slurm.sh: no apt-get here; install slurm-wlm and munge by hand (the Slurm tests skip without them)" >&2
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install_slurm.sh: run as root to apt-get install slurm-wlm and munge (the Slurm tests skip without them)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq slurm-wlm munge >/dev/null
# accounting, for sacct; the tests run jobs without it
apt-get install -y -qq --no-install-recommends slurmdbd mariadb-server >/dev/null || echo "install_slurm.sh: no slurmdbd/mariadb: sacct will not answer" >&2
echo "install_slurm.sh: $(/usr/sbin/slurmctld -V 2>/dev/null || echo slurm-wlm) installed"
