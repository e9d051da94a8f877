"""A cluster of simulated nodes on one Linux machine, for ddprun's multi-node tests.

Nodes are namespaces on a bridge (namespaces.py); on them run sshd (sshd.py), a private
Slurm cluster (slurm.py) that also emulates PBS (pbs.py), and a private Grid Engine cell
(gridengine.py). Process helpers: procs.py.

    from simcluster import Cluster     # with tests/ on PYTHONPATH
    with Cluster(4) as c:
        c.start_sshd()
        c.run("node2", ["hostname"])

As a program: python3 -m simcluster up -n 4 --ssh (see __main__.py).
Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2, util-linux; sshd for ssh;
slurmctld, slurmd and munge for Slurm; gridengine-master/-exec/-client for Grid Engine.
"""

from .cluster import Cluster
from .namespaces import SkipTest, skip_exit_code
from .procs import kill_and_wait, processes_with_marker

__all__ = ["Cluster", "SkipTest", "kill_and_wait", "processes_with_marker", "skip_exit_code"]
