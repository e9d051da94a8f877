"""Cluster: the simulated nodes with the services a test starts on them."""

from . import gridengine, slurm, sshd
from .namespaces import Nodes


class Cluster(Nodes):
    """N simulated nodes (namespaces.Nodes: nodes, addrs, dir, hostfile, run, popen,
    leftovers...) and, once started, sshd (ssh_config, ssh_key), Slurm (slurm_env) and a
    Grid Engine cell (sge_env)."""

    def __init__(self, n, prefix=None, subnet=None, base_dir=None, keep=False):
        super().__init__(n, prefix=prefix, subnet=subnet, base_dir=base_dir, keep=keep)
        self.ssh_config = self.ssh_key = None    # set by start_sshd()
        self.slurm_env = self.slurm_dir = None   # set by start_slurm()
        self.sge_env = self.sge_dir = None       # set by start_sge()

    # Each service's functions take the cluster first, so they serve as methods here.
    start_sshd = sshd.start
    ssh = sshd.ssh
    start_slurm = slurm.start
    slurm_wait = slurm.wait
    start_sge = gridengine.start
    sge_run = gridengine.run
    sge_wait = gridengine.wait
