"""Launcher detection: one table of the environments collbench meets, one object out; and a
table of leftover variables that must not pass for a launcher."""

import pytest

from collbench.launch.origin.launcher import Launcher, StrayLauncherVariables, detect

HYDRA = {"PMI_FD": "2", "PMI_HOSTNAME": "vm"}            # fd 2 is open in every test process
PMIX = {"PMIX_NAMESPACE": "prterun-vm-1@1",
        "PMIX_SERVER_URI41": "prterun-vm-1@0.0;tcp4://127.0.0.1:1"}
TORCH = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}

CASES = [
    # (what starts the ranks, environment of one rank, launcher name, rank, world size, local rank,
    # MPI world)
    ("nothing", {}, "none", 0, 1, 0, False),
    ("MPICH hydra mpiexec", {**HYDRA, "PMI_RANK": "3", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1"},
     "mpiexec", 3, 8, 1,
     True),
    ("a PMI launcher with a port", {"PMI_PORT": "node1:4000", "PMI_RANK": "1", "PMI_SIZE": "2"},
     "mpiexec", 1, 2, 0,
     True),
    ("Open MPI mpirun", {**PMIX, "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6",
                         "OMPI_COMM_WORLD_LOCAL_RANK": "2", "PMIX_RANK": "5"}, "mpiexec", 5, 6, 2,
     True),
    ("Open MPI, rank 0", {**PMIX, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
     "mpiexec", 0, 2, 0, True),
    ("srun --mpi=pmi2 (Slurm with PMI)",
     {"PMI_FD": "2", "PMI_RANK": "7", "PMI_SIZE": "16", "SLURM_STEP_ID": "0",
                                         "SLURM_PROCID": "7", "SLURM_STEP_NUM_TASKS": "16",
      "SLURM_LOCALID": "3"},
     "srun", 7, 16, 3, True),
    ("srun --mpi=pmix (Slurm with PMIx)",
     {**PMIX, "PMIX_RANK": "9", "SLURM_STEP_ID": "1", "SLURM_PROCID": "9",
                                          "SLURM_STEP_NUM_TASKS": "12", "SLURM_LOCALID": "1"},
     "srun", 9, 12, 1, True),
    ("srun without PMI variables",
     {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0",
                                    "SLURM_STEP_ID": "0"}, "srun", 2, 4, 0, True),
    ("PMIx launcher outside Slurm", {**PMIX, "PMIX_RANK": "1", "PMIX_LOCAL_RANK": "1"}, "mpiexec",
     1, 1, 1, True),
    ("torchrun",
     {**TORCH, "TORCHELASTIC_RUN_ID": "x", "RANK": "4", "WORLD_SIZE": "8", "LOCAL_RANK": "0"},
     "torchrun", 4, 8, 0, False),
    ("torchrun inside an srun step",
     {**TORCH, "TORCHELASTIC_RUN_ID": "x", "RANK": "1", "WORLD_SIZE": "2",
                                      "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1",
      "SLURM_STEP_ID": "0"},
     "torchrun", 1, 2, 0, False),
    ("collbench's own local launch",
     {**TORCH, "COLLBENCH_LAUNCHED": "local", "RANK": "1", "WORLD_SIZE": "2",
                                      "LOCAL_RANK": "1"}, "collbench", 1, 2, 1, False),
    ("RANK, WORLD_SIZE and a rendezvous by hand", {**TORCH, "RANK": "0", "WORLD_SIZE": "2"}, "env",
     0, 2, 0, False),
    ("a bare SLURM_PROCID (an sbatch script, no step)", {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"},
     "none", 0, 1, 0, False),
]


@pytest.mark.parametrize("what,env,name,rank,size,local,mpi", CASES, ids=[c[0] for c in CASES])
def test_detect(what, env, name, rank, size, local, mpi):
    found = detect(env)
    assert ((found.name, found.rank, found.world_size, found.local_rank, found.shares_mpi_world)
            == (name, rank, size, local, mpi))


STRAY = [
    # (what was left behind, environment, words the one-line reason must hold)
    ("a lone RANK", {"RANK": "1"}, ["RANK='1'", "WORLD_SIZE, MASTER_ADDR and MASTER_PORT are not"]),
    ("RANK and WORLD_SIZE without a rendezvous", {"RANK": "1", "WORLD_SIZE": "2"},
     ["MASTER_ADDR and MASTER_PORT"]),
    ("a rank beyond the world", {**TORCH, "RANK": "5", "WORLD_SIZE": "2"},
     ["rank 5 is not below the world size 2"]),
    ("a RANK that is not a number", {**TORCH, "RANK": "one", "WORLD_SIZE": "2"},
     ["RANK is not a whole number"]),
    ("a lone PMI_RANK", {"PMI_RANK": "1"}, ["PMI_RANK='1'", "no open PMI_FD or PMI_PORT"]),
    ("PMI_RANK and PMI_SIZE with a closed PMI_FD",
     {"PMI_RANK": "0", "PMI_SIZE": "2", "PMI_FD": "987"},
     ["no open PMI_FD"]),
    ("a lone PMI_SIZE", {"PMI_SIZE": "4"}, ["PMI_SIZE='4'"]),
    ("a lone OMPI_COMM_WORLD_SIZE", {"OMPI_COMM_WORLD_SIZE": "4"}, ["no Open MPI runtime"]),
    ("a lone PMIX_RANK", {"PMIX_RANK": "2"}, ["no PMIx server"]),
    ("torchrun's id without its variables", {"TORCHELASTIC_RUN_ID": "x"},
     ["RANK, WORLD_SIZE, MASTER_ADDR and"]),
]


@pytest.mark.parametrize("what,env,words", STRAY, ids=[c[0] for c in STRAY])
def test_leftover_variables_are_not_a_launcher(what, env, words):
    with pytest.raises(StrayLauncherVariables) as caught:
        detect(env)
    message = str(caught.value)
    assert ("\n" not in message and "no launcher started this process" in message
            and "unset" in message)
    for word in words:
        assert word in message


def test_hosts_join_the_launcher_once_ranks_can_talk():
    launcher = detect({**HYDRA, "PMI_RANK": "1", "PMI_SIZE": "2"}).with_hosts(["node1", "node2"])
    assert launcher.hosts == ("node1", "node2") and launcher.rank == 1
    assert isinstance(launcher, Launcher)
