"""Launcher detection: one table of the environments collbench meets, one object out."""

import pytest

from collbench.launch.launcher import Launcher, detect

CASES = [
    # (what starts the ranks, environment of one rank, launcher name, rank, world size, local rank, MPI world)
    ("nothing", {}, "none", 0, 1, 0, False),
    ("MPICH hydra mpiexec", {"PMI_RANK": "3", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1"}, "mpiexec", 3, 8, 1, True),
    ("Open MPI mpirun", {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6",
                         "OMPI_COMM_WORLD_LOCAL_RANK": "2", "PMIX_RANK": "5"}, "mpiexec", 5, 6, 2, True),
    ("Open MPI, rank 0", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, "mpiexec", 0, 2, 0, True),
    ("srun --mpi=pmi2 (Slurm with PMI)", {"PMI_RANK": "7", "PMI_SIZE": "16", "SLURM_STEP_ID": "0", "SLURM_PROCID": "7",
                                         "SLURM_STEP_NUM_TASKS": "16", "SLURM_LOCALID": "3"}, "srun", 7, 16, 3, True),
    ("srun --mpi=pmix (Slurm with PMIx)", {"PMIX_RANK": "9", "SLURM_STEP_ID": "1", "SLURM_PROCID": "9",
                                          "SLURM_STEP_NUM_TASKS": "12", "SLURM_LOCALID": "1"}, "srun", 9, 12, 1, True),
    ("srun without PMI variables", {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0",
                                    "SLURM_STEP_ID": "0"}, "srun", 2, 4, 0, True),
    ("PMIx launcher outside Slurm", {"PMIX_RANK": "1", "PMIX_LOCAL_RANK": "1"}, "mpiexec", 1, 1, 1, True),
    ("torchrun", {"TORCHELASTIC_RUN_ID": "x", "RANK": "4", "WORLD_SIZE": "8", "LOCAL_RANK": "0"},
     "torchrun", 4, 8, 0, False),
    ("collbench's own local launch", {"COLLBENCH_LAUNCHED": "local", "RANK": "1", "WORLD_SIZE": "2",
                                      "LOCAL_RANK": "1"}, "collbench", 1, 2, 1, False),
    ("RANK and WORLD_SIZE by hand", {"RANK": "0", "WORLD_SIZE": "2"}, "env", 0, 2, 0, False),
    ("a bare SLURM_PROCID (an sbatch script, no step)", {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"},
     "none", 0, 1, 0, False),
]


@pytest.mark.parametrize("what,env,name,rank,size,local,mpi", CASES, ids=[c[0] for c in CASES])
def test_detect(what, env, name, rank, size, local, mpi):
    assert detect(env) == Launcher(name, rank, size, local, mpi)


def test_hosts_join_the_launcher_once_ranks_can_talk():
    launcher = detect({"PMI_RANK": "1", "PMI_SIZE": "2"}).with_hosts(["node1", "node2"])
    assert launcher.hosts == ("node1", "node2") and launcher.rank == 1
