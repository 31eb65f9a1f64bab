"""The environment variables collbench sets and reads: each one's name and meaning, here only.

Three kinds. collbench's own (``COLLBENCH_*``): self-launch sets most of them for the ranks it
starts, the user may set ``COLLBENCH_MEMORY_LIMIT``. torch's ``env://`` contract, which
self-launch sets for ranks it starts without MPI and which the rendezvous reads under any
launcher. And what launchers set that more than one part of collbench reads; the variables
only the launcher detection reads (``PMI_RANK``, ``OMPI_COMM_WORLD_SIZE``, ``SLURM_PROCID``…)
are named in ``collbench.launch.origin.launcher`` alone, where their meaning is worked out.

Every module takes the names from here (a test keeps it so), so that a name is spelt, and its
meaning said, once. Only the standard library: guardians and the launching process import it.
"""

from __future__ import annotations

from typing import Optional

# collbench's own: set by the self-launching process for every rank of a launch.

#: How this rank was started by collbench itself: "mpi" (through mpiexec) or "local" (one
#: process per rank, torch's env:// variables set); unset when a launcher of the user's did.
LAUNCHED = "COLLBENCH_LAUNCHED"
#: The pid of the self-launching process: its ranks end when it does, however it ends.
PARENT_PID = "COLLBENCH_PARENT_PID"
#: The run's state folder (its journal, and the notes a launch leaves for the process that
#: launched it; ``collbench.launch.notes``).
STATE = "COLLBENCH_STATE"
#: Which round this launch is (1-based), and how many rounds the run has.
ROUND = "COLLBENCH_ROUND"
ROUNDS = "COLLBENCH_ROUNDS"
#: The rounds a size's --max-time is shared among, where that differs from ROUNDS: an A/B job
#: that adds pairs (``ab --max-rounds``) keeps each round's budget that of its first rounds.
BUDGET_ROUNDS = "COLLBENCH_BUDGET_ROUNDS"
#: The MPI thread level this launch initialises MPI at (``--thread-level``, one of a comma
#: list: each launch of a self-launched run is at one level).
THREAD_LEVEL = "COLLBENCH_THREAD_LEVEL"
#: mpi4py's own variable for the thread level it asks MPI_Init_thread for; collbench takes it as
#: the user's choice where --thread-level is not given.
MPI4PY_THREAD_LEVEL = "MPI4PY_RC_THREAD_LEVEL"
#: The seed of the run's shuffled order, the same in every launch of a run.
SEED = "COLLBENCH_SEED"
#: A side of an interleaved A/B job (``collbench ab``): the job, the side and what sets it
#: apart (JSON, kept as the file's ``metadata.ab``).
AB = "COLLBENCH_AB"
#: Which turn of its pair an A/B launch is ("0" or "1").
AB_TURN = "COLLBENCH_AB_TURN"
#: The Unix socket of an A/B pair's referee, when its two launches take turns size by size
#: (``run.turns``); AB_TURN is then "row".
AB_TURNS = "COLLBENCH_AB_TURNS"
#: "1" when the self-launching process's stdout (stderr) is a person's terminal: a rank's own
#: streams are the launcher's pipes.
STDOUT_TTY = "COLLBENCH_STDOUT_TTY"
STDERR_TTY = "COLLBENCH_STDERR_TTY"
#: "1" when the self-launching process's stdout and stderr are one terminal (tables then go
#: through stderr with the progress bar, so that the launcher's copying cannot reorder them).
ONE_TERMINAL = "COLLBENCH_ONE_TERMINAL"

# collbench's own: set by the user.

#: The most memory the ranks on one host may hold together (a size: 8G, 512M), below what the
#: host has free.
MEMORY_LIMIT = "COLLBENCH_MEMORY_LIMIT"

# torch.distributed's env:// contract: set by self-launch without MPI (and by torchrun), read
# by the rendezvous under any launcher.

MASTER_ADDR = "MASTER_ADDR"       #: where rank 0's store listens
MASTER_PORT = "MASTER_PORT"       #: and on which port
RANK = "RANK"                     #: this process's rank in the job
WORLD_SIZE = "WORLD_SIZE"         #: the job's number of ranks
LOCAL_RANK = "LOCAL_RANK"         #: this process's rank among those on its host
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"   #: the number of ranks on this host
#: Which network interface gloo binds; collbench sets it, unless the user did, to the one that
#: leads to MASTER_ADDR.
GLOO_SOCKET_IFNAME = "GLOO_SOCKET_IFNAME"
#: Set by torchrun: the run's id (its presence says torchrun started us), how many times the
#: agent restarted the job, and whether its agent hosts the store at MASTER_ADDR:MASTER_PORT.
TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"
TORCHELASTIC_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
TORCHELASTIC_USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"

# Set by others, read in more than one place.

#: Set by srun in every task of a job step: we run under srun.
SLURM_STEP_ID = "SLURM_STEP_ID"
#: The width a person asked output to take (the shell's, or one the user set).
COLUMNS = "COLUMNS"

#: How many threads numpy's BLAS starts, in the order OpenBLAS reads them: collbench asks for one
#: where none is set (``collbench.__main__``).
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")

#: Prefixes of the variables by which a user tunes the MPI library and its transports: named in
#: the line about a start-up that failed, since a bad value fails it (``UCX_TLS=bogus``).
LIBRARY_PREFIXES = ("UCX_", "MPIR_CVAR_", "MPICH_", "FI_", "I_MPI_", "OMPI_MCA_", "PMIX_MCA_",
                    "HYDRA_")


#: The variable that picks MPICH's CH4 network module, and the modules MPICH's builds have: its
#: library crashes in MPI_Init (SIGSEGV) on a name it lacks, saying nothing.
NETMOD = "MPIR_CVAR_CH4_NETMOD"
NETMODS = ("ucx", "ofi")


def netmod_unknown(env, netmods: tuple = NETMODS) -> Optional[str]:
    """"MPIR_CVAR_CH4_NETMOD=bogus names a network module MPICH's library has not (it has ucx,
    ofi)" when ``env`` names one that is none of ``netmods``, compared as MPICH does (case
    aside, spaces kept); None otherwise."""
    value = env.get(NETMOD)
    if not value or value.lower() in netmods:
        return None
    shown = value if value == value.strip() else repr(value)
    return (f"{NETMOD}={shown} names a network module MPICH's library has not (it has "
            f"{', '.join(netmods)})")


def netmod_problem(env, netmods: tuple = NETMODS) -> Optional[str]:
    """Why ``env``'s MPIR_CVAR_CH4_NETMOD would crash MPICH as it starts (None: it would not)."""
    unknown = netmod_unknown(env, netmods)
    return (f"{unknown}, and the library crashes as it starts; unset {NETMOD} or choose one of "
            "them") if unknown else None


def library_settings(env) -> list:
    """"NAME=value" of each variable in ``env`` that tunes the MPI library (LIBRARY_PREFIXES)."""
    return [f"{name}={value}" for name, value in sorted(env.items())
            if name.startswith(LIBRARY_PREFIXES)]

