"""Every number that can move a verdict lives in ``collbench.stats.calibration``, with a line on
the measurement that set it, and each belongs to a named term of a verdict (``TERMS``)."""

import ast
from pathlib import Path

import collbench
from collbench.stats import calibration

ROOT = Path(collbench.__file__).parent
#: settings of a numerical method that change no answer (a grid, a chunk size, an overflow guard)
NUMERICAL = {"_TINY", "_EXACT_BINOMIAL_MAX_N", "_SHAPES", "_LARGEST_LOG", "CHUNK", "CELLS"}


def _constants(path: Path) -> dict:
    """Module-level NAME = <number or expression> assignments: name -> line."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            name = node.targets[0].id
            if (name.lstrip("_").isupper() and name != "TERMS"
                    and isinstance(node.value, (ast.Constant, ast.BinOp, ast.Tuple))):
                value = node.value.value if isinstance(node.value, ast.Constant) else 0
                if not isinstance(value, str):
                    found[name] = node.lineno
    return found


def test_each_constant_belongs_to_a_term_and_each_term_to_constants_that_exist():
    defined = set(_constants(ROOT / "stats" / "calibration.py"))
    named = {c for term in calibration.TERMS for c in term.constants}
    assert len(defined) > 25, "the module is read"
    assert named - defined == set(), "a term names a constant that does not exist"
    assert defined - named == set(), "a constant that no term says it sets"
    assert len({t.name for t in calibration.TERMS}) == len(calibration.TERMS)
    assert all(t.adds and t.measured for t in calibration.TERMS)


def test_each_constant_says_what_set_it():
    lines = (ROOT / "stats" / "calibration.py").read_text().splitlines()
    bare = []
    for name, line in _constants(ROOT / "stats" / "calibration.py").items():
        above = line - 2
        while (above >= 0 and not lines[above].startswith("#:") and "=" in lines[above]
               and not lines[above].startswith("def")):
            # a constant defined right under the one its comment speaks of (OWN_WIDTH_FEW)
            above -= 1
        if above < 0 or not lines[above].startswith("#:"):
            bare.append(name)
    assert bare == []


def test_no_statistics_module_defines_a_number_of_its_own():
    """A verdict's constants were in six modules plus inline literals, CONFIDENCE twice."""
    calibrated = set(_constants(ROOT / "stats" / "calibration.py"))
    stray = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "calibration.py" and path.parent.name == "stats":
            continue
        for name, line in _constants(path).items():
            if name in calibrated:
                stray.append(f"{path.relative_to(ROOT)}:{line} defines {name} again")
            elif path.parent.name == "stats" and name not in NUMERICAL:
                stray.append(f"{path.relative_to(ROOT)}:{line} defines {name}")
    assert stray == []
