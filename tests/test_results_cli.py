"""compare, report and plot through the real command line: exit codes, output, errors."""

import json
import subprocess
import sys

import pytest

from collbench.launch.self_launch.mpiexec import find_mpiexec
from results_helpers import metadata, one_line_error, run_cli, run_of, sweep, write
from collbench.results.records import SCHEMA_VERSION

SERIES = sweep(backends=("mpi", "mpi-pickle"))


@pytest.fixture
def files(tmp_path):
    """base.json; same.json (another run, same speed); slow.json (3x); fast.json (0.5x); CSVs of
    base and slow."""
    base, same = run_of(SERIES, seed=1), run_of(SERIES, seed=2)
    slow, fast = run_of(SERIES, seed=3, scale=3.0), run_of(SERIES, seed=4, scale=0.5)
    paths = {name: write(run, tmp_path / f"{name}.json")
             for name, run in (("base", base), ("same", same), ("slow", slow), ("fast", fast))}
    paths["base_csv"] = write(base, tmp_path / "base.csv")
    paths["slow_csv"] = write(slow, tmp_path / "slow.csv")
    return paths


@pytest.mark.parametrize("name", ["compare", "report", "plot", "merge"])
def test_help(name, tmp_path):
    proc = run_cli([name, "--help"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith(f"Usage: collbench {name}")


def test_compare_help_imports_nothing_heavy(tmp_path):
    code = ("import sys; from collbench.cli.app import main\ntry:\n    main(['compare', "
            "'--help'])\nexcept SystemExit:\n    pass\nprint('IMPORTED', [m for m in ('torch', "
            "'mpi4py', 'matplotlib', 'pandas', 'rich') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path)
    assert "IMPORTED []" in proc.stdout, proc.stdout + proc.stderr


def test_identical_files_exit_0(files, tmp_path):
    proc = run_cli(["compare", files["base"], files["base"]], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"no regression: 0 slower, 0 faster, {len(SERIES)} same")


def test_same_speed_run_exits_0(files, tmp_path):
    proc = run_cli(["compare", files["base"], files["same"]], tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.startswith("no regression: 0 slower, 0 faster")


def test_three_times_slower_exits_1(files, tmp_path):
    proc = run_cli(["compare", files["base"], files["slow"]], tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"REGRESSION: {len(SERIES)} slower")
    assert proc.stdout.count(" slower ") >= len(SERIES)       # one per table row
    assert "3.0" in proc.stdout and "Traceback" not in proc.stderr


def test_faster_exits_0(files, tmp_path):
    proc = run_cli(["compare", files["base"], files["fast"], "--metric", "busbw_gbps"], tmp_path)
    assert proc.returncode == 0 and f"0 slower, {len(SERIES)} faster" in proc.stdout


def test_csv_files_compare_on_their_round_medians(files, tmp_path):
    proc = run_cli(["compare", files["base_csv"], files["slow_csv"], "--format", "json"], tmp_path)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    by_json = json.loads(run_cli(["compare", files["base"], files["slow"], "--format", "json"],
                                 tmp_path).stdout)
    assert [r["rounds_baseline"] for r in doc["rows"]] == [r["rounds_baseline"]
                                                           for r in by_json["rows"]]
    assert (all(r["rounds_baseline"] >= 4 for r in doc["rows"])
            and doc["summary"]["slower"] == len(SERIES))
    # the CSVs carry the run metadata: nothing to warn about
    assert proc.stderr == ""
    mixed = run_cli(["compare", files["base"], files["base_csv"]], tmp_path)
    assert mixed.returncode == 0 and mixed.stderr == ""
    old = tmp_path / "old.csv"                       # written before CSVs had the metadata column
    import pandas as pd

    pd.read_csv(files["base_csv"]).drop(columns=["run_metadata"]).to_csv(old, index=False)
    proc = run_cli(["compare", old, files["slow_csv"]], tmp_path)
    assert proc.returncode == 1 and "old.csv is a CSV without run metadata" in proc.stderr


def test_markdown_is_a_job_summary(files, tmp_path):
    proc = run_cli(["compare", files["base"], files["slow"], "--format", "markdown"], tmp_path)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("## collbench compare: REGRESSION")
    assert lines[2] == f"**{len(SERIES)} slower, 0 faster, 0 same, 0 inconclusive**"
    assert "| collective | backend | size |" in proc.stdout and "**slower**" in proc.stdout
    assert "<details>" in proc.stdout


def test_json_output_and_metadata_warning(files, tmp_path):
    other = write(run_of(SERIES, seed=5, meta=metadata(hostnames=["ci-runner-9"])),
                  tmp_path / "other.json")
    proc = run_cli(["compare", files["base"], other, "-f", "json", "--threshold", "0.5"], tmp_path)
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["threshold"] == 0.5 and doc["regression"] is False
    assert any("hostnames differs" in w for w in doc["warnings"])
    assert "collbench: warning: hostnames differs: node1" in proc.stderr


def test_threshold_changes_the_verdict(files, tmp_path):
    # beyond what it can tell: not a regression; undecided where too few rows are the same
    assert run_cli(["compare", files["base"], files["slow"], "--threshold", "250%"],
                   tmp_path).returncode in (0, 3)
    assert run_cli(["compare", files["base"], files["slow"], "--threshold", "10%"],
                   tmp_path).returncode == 1


@pytest.mark.parametrize("content", ["garbage, not a result\n", ""])
def test_garbage_and_empty_files_exit_2_with_one_line(files, tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    for args in (["compare", files["base"], bad], ["compare", bad, files["base"]], ["report", bad],
                 ["plot", bad, "-o", tmp_path / "p.png"]):
        proc = run_cli(args, tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "bad.json" in one_line_error(proc) and proc.stdout == ""


def test_incomparable_and_bad_options_exit_2(files, tmp_path):
    other = write(run_of({("bcast", "gloo", 8): 3.0}), tmp_path / "other.json")
    assert "incomparable" in one_line_error(run_cli(["compare", files["base"], other], tmp_path))
    bad = run_cli(["compare", files["base"], files["slow"], "--threshold", "5"], tmp_path)
    assert bad.returncode == 2 and "ambiguous" in one_line_error(bad)
    bad = run_cli(["compare", files["base"], files["slow"], "--metric", "speed"], tmp_path)
    assert bad.returncode == 2 and "--metric" in one_line_error(bad)
    missing = run_cli(["compare", files["base"], tmp_path / "absent.json"], tmp_path)
    assert missing.returncode == 2 and "no such file" in one_line_error(missing)


def test_report_merges_files_and_fits(tmp_path):
    mpi = write(run_of(sweep(backends=("mpi",), alpha_us=3.0, beta_gbps=2.0)),
                tmp_path / "mpi.json")
    pickle = run_of({("allreduce", "mpi-pickle", s): 30.0 + s / 1e3
                     for s in (8, 64, 1024, 8192, 65536)})
    pickle_csv = write(pickle, tmp_path / "pickle.csv")
    proc = run_cli(["report", mpi, pickle_csv, "--format", "markdown"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("# collbench report")
    # merged
    assert ("| size | mpi p50 µs | mpi CI | mpi busbw GB/s |" in text
            and "| mpi-pickle p50 µs |" in text)
    fit_lines = {line.split(" | ")[1]: line for line in text.splitlines()
                 if line.startswith("| allreduce | mpi") and "float32 sum, 2 ranks" in line}
    assert set(fit_lines) == {"mpi", "mpi-pickle"}
    alpha_us = {name: float(line.split(" | ")[3]) for name, line in fit_lines.items()}
    assert (alpha_us["mpi"] == pytest.approx(3.0, rel=0.05)
            and alpha_us["mpi-pickle"] == pytest.approx(30.0, rel=0.05))
    terminal = run_cli(["report", mpi], tmp_path)
    assert terminal.returncode == 0 and "latency–bandwidth fit" in terminal.stdout


def test_report_says_which_rows_are_too_noisy_to_gate(tmp_path):
    quiet = write(run_of(SERIES, seed=1, rounds=10, launch_sd=0.01), tmp_path / "quiet.json")
    noisy = write(run_of(SERIES, seed=1, rounds=3, launch_sd=0.3), tmp_path / "noisy.json")
    one = write(run_of(SERIES, seed=1, rounds=1), tmp_path / "one.json")
    verdicts = {}
    for name, path in (("quiet", quiet), ("noisy", noisy), ("one", one)):
        proc = run_cli(["report", path, "--format", "markdown", "--threshold", "10%"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        # a table whose every row would say "needs 2+ rounds" says nothing: it is left out
        assert ("## what a comparison against this baseline can detect"
                in proc.stdout) == (name != "one")
        verdicts[name] = {line.rsplit(" | ", 1)[1].rstrip(" |") for line in proc.stdout.splitlines()
                          if line.startswith("| allreduce | ") and " | latency | " in line}
    assert verdicts == {"quiet": {"ok"}, "noisy": {"too noisy"}, "one": set()}


def test_plot_command_writes_png(files, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plot.png"
    proc = run_cli(["plot", files["base"], files["base_csv"], "-o", out], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"
    again = run_cli(["plot", files["base"], "-o", out], tmp_path)
    assert again.returncode == 2 and "--force" in one_line_error(again)


@pytest.mark.mpi
def test_end_to_end_sweeps_compare_report_plot(tmp_path):
    if find_mpiexec() is None:
        pytest.skip("no mpiexec")
    sweep_args = ["allreduce", "-n", "2", "--sizes", "8-4K", "--backend", "mpi", "--max-time",
                  "0.2"]
    first = run_cli(sweep_args + ["-o", "base.json", "-o", "base.csv", "-o", "base.md", "-f",
                                  "markdown"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "| size | count | rounds | iters | p50 µs | 95% CI µs | run cv |" in first.stdout
    assert "## allreduce · float32 sum · 2 ranks · latency" in (tmp_path / "base.md").read_text()
    second = run_cli(sweep_args + ["-o", "new.json", "-q"], tmp_path)
    assert second.returncode == 0, second.stderr

    gate = run_cli(["compare", "base.json", "new.json", "--format", "markdown"], tmp_path)
    assert gate.returncode in (0, 1, 3), gate.stderr       # a noisy machine may really differ
    assert gate.stdout.startswith("## collbench compare: ")
    assert ("REGRESSION" in gate.stdout.splitlines()[0]) == (gate.returncode == 1)
    loose = run_cli(["compare", "base.json", "new.json", "--threshold", "1000%", "-f", "json"],
                    tmp_path)
    # 0, or 3 where a loaded machine spread the rounds beyond what even 1000% can gate (8 B at 9 ms)
    assert loose.returncode in (0, 3) and "Traceback" not in loose.stderr, loose.stderr
    doc = json.loads(loose.stdout)
    assert doc["status"] == loose.returncode
    # every round counts, busy or not, less those far above their row's fastest (interference)
    assert len(doc["rows"]) == 10 and all(1 <= r["rounds_baseline"] <= 5
                                          and 1 <= r["rounds_new"] <= 5 for r in doc["rows"])
    assert [w for w in doc["warnings"] if "busy" not in w and "interference" not in w] == []
    csv_gate = run_cli(["compare", "base.csv", "new.json", "--threshold", "1000%"], tmp_path)
    assert csv_gate.returncode in (0, 3) and "Traceback" not in csv_gate.stderr

    report = run_cli(["report", "base.json", "--format", "markdown"], tmp_path)
    assert (report.returncode == 0
            and "| allreduce | mpi | float32 sum, 2 ranks, latency |" in report.stdout)

    pytest.importorskip("matplotlib")
    plot = tmp_path / "sweep.png"
    proc = run_cli(["plot", "base.json", "new.json", "-o", plot], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"


def _run_with_id(seed, run_id, **kw):
    run = run_of(SERIES, seed=seed, **kw)
    run.metadata["run_id"] = run_id
    run.metadata["rounds"] = [{"round": d.round, "run_id": run_id, "load": {"busy": False}}
                              for d in run.rounds[0]]
    return run


def test_a_label_with_an_escape_is_shown_not_obeyed(files, tmp_path):
    proc = run_cli(["report", files["base"], files["slow"], "--label", "a\x1b[31mred", "--label",
                    "b"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "a\\x1b[31mred" in proc.stdout


def test_merge_puts_runs_side_by_side(tmp_path):
    first = write(_run_with_id(1, "aaa", rounds=3), tmp_path / "a.json")
    second = write(_run_with_id(2, "bbb", rounds=4, meta=metadata(hostnames=["node9"])),
                   tmp_path / "b.json")
    proc = run_cli(["merge", first, second, "-o", "m.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "merged 2 runs, 7 rounds" in proc.stderr and "hostnames differs" in proc.stderr
    from collbench.results.loader import load_result
    merged = load_result(tmp_path / "m.json")
    assert [r["round"] for r in merged.metadata["rounds"]] == list(range(1, 8))
    assert [r["run_id"] for r in merged.metadata["rounds"]] == ["aaa"] * 3 + ["bbb"] * 4
    assert [s["rounds"] for s in merged.metadata["merged_from"]] == [3, 4]
    assert all(r.rounds == 7 and len(r.time_us_round_p50s) == 7 for r in merged.rows)
    assert [d.round for d in merged.rounds[0]] == list(range(1, 8))
    again = run_cli(["merge", first, second, "-o", "m.json"], tmp_path)
    assert again.returncode == 2 and "--force" in one_line_error(again)
    assert run_cli(["compare", "m.json", second], tmp_path).returncode == 0


def test_merge_refuses_a_file_holding_a_row_twice_and_says_when_files_share_no_row(tmp_path):
    doubled = _run_with_id(1, "aaa", rounds=3)
    doubled.add(doubled.rows[0], doubled.rounds[0])
    dup = write(doubled, tmp_path / "dup.json")
    other = write(_run_with_id(2, "bbb", rounds=3), tmp_path / "b.json")
    proc = run_cli(["merge", dup, other, "-o", "m.json"], tmp_path)
    assert (proc.returncode == 2
            and "dup.json: two rows for allreduce mpi" in one_line_error(proc)), proc.stderr
    assert not (tmp_path / "m.json").exists()
    apart = write(run_of(sweep(backends=("gloo",)), seed=3, rounds=3), tmp_path / "gloo.json")
    proc = run_cli(["merge", other, apart, "-o", "u.json"], tmp_path)
    assert proc.returncode == 0 and "the files share no row" in proc.stderr, proc.stderr


def test_merge_takes_version_1_files_and_refuses_what_it_cannot_merge(files, tmp_path):
    from pathlib import Path
    v1 = Path(__file__).resolve().parent / "data" / "v1-allreduce-mpi-vs-pickle.json"
    copy = tmp_path / "v1-again.json"
    copy.write_text(v1.read_text())
    proc = run_cli(["merge", v1, copy, "-o", "old.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "old.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and all(r["rounds"] == 2 for r in doc["rows"])
    assert [r["run_id"] for r in doc["metadata"]["rounds"]] == [v1.name, copy.name]
    for args, message in ((["merge", files["base"], "-o", "x.json"], "two or more"),
                          (["merge", v1, v1, "-o", "x.json"], "the same run"),
                          (["merge", files["base"], files["base_csv"], "-o", "x.json"],
                           "a CSV has no rounds"),
                          (["merge", files["base"], files["same"], "-o", "x.csv"],
                           "does not end in .json")):
        bad = run_cli(args, tmp_path)
        assert bad.returncode == 2 and message in one_line_error(bad), bad.stderr


def _table(markdown: str, title: str) -> list:
    """The data rows of the markdown table under ``## title``, as lists of cells."""
    lines = markdown.split(f"## {title}\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_report_shows_runs_of_one_setup_side_by_side(files, tmp_path):
    proc = run_cli(["report", files["base"], files["slow"], "-f", "markdown"], tmp_path)
    assert proc.returncode == 0 and "replaced" not in proc.stderr, proc.stderr
    text = proc.stdout
    assert "## allreduce · float32 sum · 2 ranks · latency · mpi · thread single\n" in text
    assert "## allreduce · float32 sum · 2 ranks · latency · mpi-pickle · thread single\n" in text
    assert ("| size | base.json p50 µs | base.json CI |" in text
            and "| slow.json p50 µs | slow.json CI |" in text)
    for title in ("allreduce · float32 sum · 2 ranks · latency · mpi · thread single",
                  "allreduce · float32 sum · 2 ranks · latency · mpi-pickle · thread single"):
        rows = _table(text, title)
        assert len(rows) == 5
        # slow against base: about 3×
        assert all(2.7 < float(row[-1].rstrip("×")) < 3.3 for row in rows)
    # a fit per run
    assert "| allreduce | mpi | base.json | float32 sum, 2 ranks, latency |" in text
    assert "| allreduce | mpi | slow.json | float32 sum, 2 ranks, latency |" in text
    terminal = run_cli(["report", files["base"], files["slow"]], tmp_path)
    assert (terminal.returncode == 0 and terminal.stdout.count("base.json") >= 4
            and "slow.json" in terminal.stdout)


def test_report_labels_runs_and_refuses_a_wrong_label_count(files, tmp_path):
    proc = run_cli(["report", files["base"], files["fast"], "--label", "before", "--label", "after",
                    "-f", "markdown"],
                   tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| size | before p50 µs |" in proc.stdout and "| after p50 µs |" in proc.stdout
    assert f"`{files['base']}` (before)" in proc.stdout
    for args in (["report", files["base"], files["slow"], "--label", "one"],
                 ["plot", files["base"], files["slow"], "--label", "one", "-o",
                  tmp_path / "p.png"]):
        bad = run_cli(args, tmp_path)
        assert bad.returncode == 2 and bad.stdout == ""
        assert "--label given 1 time(s) for 2 file(s)" in one_line_error(bad)
    twice = run_cli(["report", files["base"], files["slow"], "--label", "x", "--label", "x"],
                    tmp_path)
    assert twice.returncode == 2 and "given twice" in one_line_error(twice)


def test_report_of_one_file_given_twice_reads_it_once(files, tmp_path):
    proc = run_cli(["report", files["base"], files["base"], "-f", "markdown"], tmp_path)
    assert proc.returncode == 0 and "given again: read once" in proc.stdout
    assert "| size | mpi p50 µs |" in proc.stdout and "base.json p50" not in proc.stdout


def test_report_diff_against_the_first_file(files, tmp_path):
    proc = run_cli(["report", files["base"], files["slow"], files["fast"], "--diff", "-f",
                    "markdown"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("# collbench report: change against the first file")
    slow = _table(text, "slow.json against base.json: median time")
    fast = _table(text, "fast.json against base.json: median time")
    assert len(slow) == len(fast) == len(SERIES)
    assert {row[1] for row in slow} == {"mpi", "mpi-pickle"}
    for row in slow:
        assert 170 < float(row[-2].rstrip("%")) < 230 and row[-1] == "apart ↑"
        assert float(row[-3]) / float(row[-4]) == pytest.approx(1 + float(row[-2].rstrip("%"))
                                                                / 100, rel=0.01)
    assert all(-55 < float(row[-2].rstrip("%")) < -45 and row[-1] == "apart ↓" for row in fast)
    assert (f"_{len(SERIES)} row(s) slower and 0 faster beyond both CIs, of {len(SERIES)} compared"
            in text)
    terminal = run_cli(["report", files["base"], files["slow"], "--diff"], tmp_path)
    assert terminal.returncode == 0 and "slow.json against base.json" in terminal.stdout
    assert terminal.stdout.count("apart ↑") == len(SERIES)


def test_report_diff_refuses_what_it_cannot_diff(files, tmp_path):
    other = write(run_of({("bcast", "mpi", 8): 3.0}), tmp_path / "other.json")
    for args, message in ((["report", files["base"], "--diff"], "two or more files"),
                          (["report", files["base"], other, "--diff"], "no row in common"),
                          (["report", files["base"], files["slow"], "--diff", "--per-rank"],
                           "choose one")):
        bad = run_cli(args, tmp_path)
        assert bad.returncode == 2 and message in one_line_error(bad) and bad.stdout == ""


def test_report_per_rank_of_two_runs_shows_each(files, tmp_path):
    proc = run_cli(["report", files["base"], files["slow"], "--per-rank", "-f", "markdown"],
                   tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# collbench report: per rank")
    for name in ("base.json", "slow.json"):
        assert (f"## allreduce · float32 sum · 2 ranks · latency · per rank · {name}\n"
                in proc.stdout)
        assert f"## per host · {name}\n" in proc.stdout


def test_plot_command_overlays_runs_of_one_setup(files, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "runs.svg"
    proc = run_cli(["plot", files["base"], files["slow"], "--label", "before", "--label", "after",
                    "-o", out], tmp_path)
    assert proc.returncode == 0 and "replaced" not in proc.stderr, proc.stderr
    assert "<svg" in out.read_text()[:500]
