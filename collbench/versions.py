"""How the libraries collbench measures name themselves, tidied once for every reader: the
backend that records the name, ``env``, and the loader of older files. Only the standard
library: every package may import it.
"""


def tidy_library_version(text: str) -> str:
    """The MPI library's name and version from what it says of itself: "MPICH Version:      5.0.2"
    (and more lines) becomes "MPICH 5.0.2"; "Open MPI v5.0.7, package: ..." becomes "Open MPI
    v5.0.7"."""
    lines = str(text).strip().splitlines()
    first = " ".join(lines[0].split()) if lines else ""
    first = first.split(",")[0].strip()
    return first.replace(" Version: ", " ").replace(" version: ", " ")
