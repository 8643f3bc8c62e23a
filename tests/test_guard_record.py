"""A pass whose job ran is recorded, or the guard says loudly that it was not; a failed pass keeps
the tail of the job's output; the guard's files are never read through symlinks; damaged locks
and absurd durations are typed errors.

Real processes and real file systems: a full or read-only disk is a real tmpfs (in a private
mount namespace, ``unshare``), a dropped PostgreSQL connection is ``pg_terminate_backend`` on the
guard's own backend while its job runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from conftest import PG_URL
from helpers import Result, alive, cli_env, run_cli, wait_for
from phaselog.guard import Guard, Holder
from phaselog.guard.job import HISTORY_TAIL_BYTES, tail_text
from phaselog.model.durations import MAX_DAYS, parse_duration
from phaselog.model.errors import Corrupt, UsageError
from phaselog.stores import open_store

NAME = "closeout"


def cli(*args: str, env: dict[str, str]) -> Result:
    res = run_cli(None, *args, env=env)
    assert "internal error" not in res.out + res.err, res.out + res.err
    return res


def store_target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, str]:
    """(what Guard takes, the --store URL) for a fresh store of ``kind``."""
    if kind == "files":
        return tmp_path / "store", str(tmp_path / "store")
    url = f"sqlite://{tmp_path}/g.db" if kind == "sqlite" else str(request.getfixturevalue("pg_schema_url"))
    return open_store(url), url


# -- the output's tail -----------------------------------------------------------------------------
NOISY = textwrap.dedent("""
    import sys
    sys.stdout.write("a" * 10000 + "\\nLAST-OUT é\\n")
    sys.stdout.flush()
    sys.stderr.write("b" * 10000 + "\\nLAST-ERR [bold]x[/bold]\\n")
    sys.exit(int(sys.argv[1]))
""")


@pytest.mark.parametrize("kind", ["files", "sqlite", "postgres"])
def test_a_failed_pass_keeps_the_tail_of_the_jobs_output(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, capfd: pytest.CaptureFixture[str]
) -> None:
    target, _ = store_target(kind, tmp_path, request)
    try:
        g = Guard(target, NAME)
        res = g.run([sys.executable, "-c", NOISY, "2"])
        assert (res.exit_code, res.outcome) == (2, "failure")
        seen = capfd.readouterr()
        assert seen.out == "a" * 10000 + "\nLAST-OUT é\n", "stdout passes through, whole"
        assert seen.err.startswith("b" * 10000 + "\nLAST-ERR"), "stderr passes through, whole"
        ok = g.run([sys.executable, "-c", NOISY, "0"])
        assert ok.outcome == "success"
        failed, passed = g.history()
        assert failed["stdout_tail"].endswith("aaa\nLAST-OUT é\n")
        assert failed["stderr_tail"].endswith("bbb\nLAST-ERR [bold]x[/bold]\n")
        for key in ("stdout_tail", "stderr_tail"):
            assert 4000 < len(failed[key].encode()) <= HISTORY_TAIL_BYTES
        assert "stdout_tail" not in passed, "a successful pass keeps no output"
        assert "stderr_tail" not in passed
    finally:
        if kind != "files":
            target.close()


def test_history_table_shows_the_last_line_of_a_failed_pass(tmp_path: Path) -> None:
    root = tmp_path / "store"
    env = cli_env(root)
    job = [sys.executable, "-c", NOISY, "4"]
    assert cli("guard", "run", "--name", NAME, "--", *job, env=env).rc == 4
    hist = cli("guard", "history", "--name", NAME, env=env).json["history"]
    assert hist[0]["stderr_tail"].endswith("LAST-ERR [bold]x[/bold]\n")
    # A wide terminal: tables fit the terminal (80 columns when not one), and a long line folds.
    table = cli("guard", "history", "--name", NAME, "--format", "table", env={**env, "COLUMNS": "200"})
    assert table.rc == 0
    assert "LAST-ERR [bold]x[/bold]" in table.out, "the last line, shown literally (not as markup)"


def test_tail_text_starts_at_a_character_boundary() -> None:
    data = "é".encode() * 3000  # two bytes each: a 4096-byte cut may land mid-character
    tail = tail_text(data[1:])
    assert set(tail) == {"é"}
    assert len(tail.encode()) <= HISTORY_TAIL_BYTES


@given(st.text(max_size=3000))
def test_tail_text_is_a_suffix_of_the_output(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    try:
        whole = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # lone surrogates: not UTF-8 output
    tail = tail_text(data)
    assert whole.endswith(tail)
    assert len(tail.encode()) <= HISTORY_TAIL_BYTES
    assert len(data) <= HISTORY_TAIL_BYTES or len(tail.encode()) > HISTORY_TAIL_BYTES - 4


# -- the job's group: leftovers, signals, the gate --------------------------------------------------
def test_processes_the_job_leaves_behind_are_ended_before_the_lock_is_released(tmp_path: Path) -> None:
    root, pidfile = tmp_path / "store", tmp_path / "bg.pid"
    g = Guard(root, NAME)
    res = g.run(["sh", "-c", f'sleep 300 & echo $! > "{pidfile}"; exit 0'])
    assert res.exit_code == 0
    bg = int(pidfile.read_text())
    assert not alive(bg), "a process the job left running in its group must not outlive the pass"
    assert g.history()[-1]["leftovers_ended"] == 1
    assert g.status()["lock"] is None


#: Start ``phaselog`` with the signals the guard forwards at their default action, as from a
#: terminal. A guard started from a background job or under ``nohup`` inherits INT/QUIT/HUP
#: ignored, and so does its job (an ignored disposition survives ``exec``): a forwarded INT would
#: reach a shell that ignores it. The test states the environment it means instead of inheriting
#: the runner's (a gate run in the background ignored INT, and this test waited 60 s and failed).
_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):\n"
    "    signal.signal(s, signal.SIG_DFL)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'phaselog', *sys.argv[1:]])"
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_guard_reaches_every_process_of_the_job(tmp_path: Path, sig: int) -> None:
    root, pidfile = tmp_path / "store", tmp_path / "bg.pid"
    env = cli_env(root)
    job = f'sleep 300 & echo $! > "{pidfile}"; wait'
    guard = subprocess.Popen(
        [sys.executable, "-c", _DEFAULT_SIGNALS, "guard", "run", "--name", NAME, "--", "sh", "-c", job],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), "the job's background sleep")
    bg = int(pidfile.read_text())
    shell = psutil.Process(bg).ppid()
    os.kill(guard.pid, sig)
    err = guard.communicate(timeout=60)[1].decode()
    assert "Traceback" not in err
    assert not alive(bg)
    assert not alive(shell)
    [entry] = Guard(root, NAME).history()
    assert (entry["outcome"], entry["exit_code"]) == ("failure", 128 + sig)
    assert Guard(root, NAME).status()["lock"] is None


def test_a_guard_that_dies_before_opening_the_gate_runs_nothing(tmp_path: Path) -> None:
    """The lock names the job's group before the job starts; a guard killed in between leaves a
    gate that exits without running the command."""
    root, marker = tmp_path / "store", tmp_path / "ran"
    res = cli(
        "guard", "run", "--name", NAME, "--", "touch", str(marker),
        env=cli_env(root, PHASELOG_FAULT="guard.before_gate"),
    )  # fmt: skip
    assert res.rc == 137
    lock = yaml.safe_load((root / "pipeline_checkpoints" / f"{NAME}.lock").read_text())
    assert lock["pgid"] > 0
    wait_for(lambda: not alive(lock["pgid"]), "the gate to exit")
    assert not marker.exists(), "the command must not run when its group was not safely recorded"
    after = cli("guard", "run", "--name", NAME, "--", "touch", str(marker), env=cli_env(root))
    assert after.rc == 0, after.out + after.err
    assert marker.exists()
    assert "took over the lock" in after.err


# -- a pass that cannot be recorded -----------------------------------------------------------------
def _unshare_ok() -> str | None:
    if not shutil.which("unshare"):
        return "no unshare(1)"
    probe = subprocess.run(["unshare", "-r", "-m", "true"], capture_output=True, check=False)
    return None if probe.returncode == 0 else f"unshare -r -m fails: {probe.stderr.decode().strip()}"


def require_unshare() -> None:
    reason = _unshare_ok()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true and {reason}: the disk tests must not be skipped in CI")
        pytest.skip(reason)


DISK_SCRIPT = """\
set -u
mount -t tmpfs -o size=512k tmpfs "$MNT"
guard() {{ "$PY" -m phaselog guard run --name closeout {store} "$@"; }}
guard -- true > "$OUT/first.out" 2>&1; echo $? > "$OUT/first.rc"
guard -- sh -c '{break_disk}; echo "the job ran"; exit 0' > "$OUT/broken.out" 2> "$OUT/broken.err"
echo $? > "$OUT/broken.rc"
cp -a "$MNT" "$OUT/after"
{mend_disk}
guard -- true > "$OUT/again.out" 2> "$OUT/again.err"; echo $? > "$OUT/again.rc"
cp -a "$MNT" "$OUT/final"
"""
BREAK = {
    "full": 'dd if=/dev/zero of="$MNT/filler" bs=4k 2>/dev/null || true',
    "readonly": 'mount -o remount,ro "$MNT"',
}
MEND = {"full": 'rm -f "$MNT/filler"', "readonly": 'mount -o remount,rw "$MNT"'}


@pytest.mark.slow
# (SQLite on a read-only remount is not here: the kernel refuses to remount a file system read-only
# while the database is open for writing, so that case cannot arise that way.)
@pytest.mark.parametrize(("kind", "disk"), [("files", "full"), ("files", "readonly"), ("sqlite", "full")])
def test_a_pass_that_cannot_be_recorded_is_reported_loudly_and_nothing_is_half_written(
    kind: str, disk: str, tmp_path: Path
) -> None:
    require_unshare()
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    store = '--root "$MNT/store"' if kind == "files" else '--store "sqlite://$MNT/g.db"'
    script = DISK_SCRIPT.format(store=store, break_disk=BREAK[disk], mend_disk=MEND[disk])
    env = cli_env(MNT=str(mnt), OUT=str(out), PY=sys.executable)
    subprocess.run(["unshare", "-r", "-m", "sh", "-c", script], env=env, timeout=300, check=True)

    def rc(step: str) -> int:
        return int((out / f"{step}.rc").read_text())

    assert rc("first") == 0, (out / "first.out").read_text()
    broken_out, broken_err = (out / "broken.out").read_text(), (out / "broken.err").read_text()
    assert "Traceback" not in broken_out + broken_err
    assert rc("broken") == 1, broken_out + broken_err
    assert broken_out.startswith("the job ran\n")
    error = json.loads(broken_out.removeprefix("the job ran\n"))
    assert (error["success"], error["error_code"], error["rule"]) == (False, "pass_not_recorded", "pass_not_recorded")
    assert (error["job_exit_code"], error["outcome"]) == (0, "success")
    assert error["not_written"] == ["state", "history"]
    assert error["pass"]["command"][0] == "sh"
    why = "disk is full" if disk == "full" else "read-only"
    assert "ERROR: guard closeout: the job ran (exit 0, success), but its pass could not be recorded" in broken_err
    assert why in broken_err
    # Nothing half-written: the state is the first pass's, whole; no temporary files.
    if kind == "files":
        ck = out / "after" / "store" / "pipeline_checkpoints"
        assert yaml.safe_load((ck / f"{NAME}-state.yaml").read_text())["pass_count"] == 1
        assert not list(ck.rglob(".tmp-*"))
        assert len(list((ck / f"{NAME}.history").glob("*.json"))) == 1
    # Once the disk is mended, the next invocation goes on (taking over the lock if it was left).
    assert rc("again") == 0, (out / "again.out").read_text() + (out / "again.err").read_text()
    if kind == "files":
        final = Guard(out / "final" / "store", NAME)
    else:
        final = Guard(open_store(f"sqlite://{out}/final/g.db"), NAME)
    assert final.status()["state"]["pass_count"] == 2
    assert [h["kind"] for h in final.history() if h["kind"] == "pass"] == ["pass", "pass"]


def _terminate_backends(app: str) -> int:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


@pytest.mark.parametrize("code", [0, 3])
def test_postgres_connection_dropped_during_the_job_still_records_the_pass(
    pg_schema_url: str, tmp_path: Path, code: int
) -> None:
    app = f"guard-{uuid.uuid4().hex[:12]}"
    url = f"{pg_schema_url}&application_name={app}"
    ready, go = tmp_path / "ready", tmp_path / "go"
    job = f'touch "{ready}"; while [ ! -e "{go}" ]; do sleep 0.02; done; echo "it broke" >&2; exit {code}'
    guard = subprocess.Popen(
        [sys.executable, "-m", "phaselog", "guard", "run", "--name", NAME, "--store", url, "--", "sh", "-c", job],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(ready.exists, "the job to start")
    assert _terminate_backends(app) == 1, "the guard's own backend (and only it) is terminated"
    go.touch()
    out, err = (x.decode() for x in guard.communicate(timeout=120))
    assert "Traceback" not in out + err
    assert guard.returncode == code, out + err
    store = open_store(pg_schema_url)
    try:
        g = Guard(store, NAME)
        status = g.status()
        assert status["lock"] is None, "the lease is released, not left for --stale-after"
        assert status["state"]["pass_count"] == 1
        assert status["state"]["consecutive_failures"] == (1 if code else 0), "the failure counts"
        [entry] = g.history()
        assert (entry["kind"], entry["exit_code"]) == ("pass", code)
        if code:
            assert entry["stderr_tail"] == "it broke\n"
    finally:
        store.close()


# -- symlinks -------------------------------------------------------------------------------------
def _ck(root: Path) -> Path:
    d = root / "pipeline_checkpoints"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


@pytest.mark.parametrize("which", ["state", "lock"])
def test_guard_files_are_never_read_through_a_symlink(tmp_path: Path, which: str) -> None:
    root, marker = tmp_path / "store", tmp_path / "ran"
    secret = tmp_path / "elsewhere.yaml"
    secret.write_text("pass_count: 4242\nconsecutive_failures: 0\npid: 4242\nstarted_at: '2026-01-01T00:00:00Z'\n")
    before = secret.read_bytes()
    name = f"{NAME}-state.yaml" if which == "state" else f"{NAME}.lock"
    (_ck(root) / name).symlink_to(secret)
    env = cli_env(root)
    for args in (["status", "--name", NAME], ["run", "--name", NAME, "--", "touch", str(marker)]):
        res = cli("guard", *args, env=env)
        assert res.rc == 1, res.out + res.err
        err = res.json
        assert (err["error_code"], err["rule"]) == ("io_error", "no_symlinks")
        assert name in err["error"]
        assert "4242" not in res.out + res.err, "the symlink's target must not be read"
    assert not marker.exists()
    assert secret.read_bytes() == before
    assert (_ck(root) / name).is_symlink(), "the symlink is left for a person to look at"


def test_a_symlinked_history_entry_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "store"
    g = Guard(root, NAME)
    g.run(["true"])
    secret = tmp_path / "secret.json"
    secret.write_text('{"kind": "pass", "secret": "s3cr3t"}')
    (_ck(root) / f"{NAME}.history" / "000000002.json").symlink_to(secret)
    hist = g.history()
    assert [h["kind"] for h in hist] == ["pass", "damaged"]
    assert "symlink" in hist[1]["error"]
    assert "s3cr3t" not in json.dumps(hist)


def test_a_symlinked_guard_directory_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    (root / "pipeline_checkpoints").symlink_to(elsewhere)
    res = cli("guard", "status", "--name", NAME, env=cli_env(root))
    assert res.rc == 1
    assert res.json["rule"] == "no_symlinks"


# -- damaged locks ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pid", "abc"),
        ("pid", -4),
        ("pid", True),
        ("process_start", "abc"),
        ("process_start", float("nan")),
        ("started_at", 5),
        ("host", 7),
        ("token", [1]),
        ("pgid", "x"),
        ("pgid", 0),
        ("job_start", "soon"),
    ],
)
def test_a_lock_field_that_breaks_its_rule_is_a_corrupt_error_naming_it(field: str, value: Any) -> None:
    data: dict[str, Any] = {"pid": 10, "host": "h", "process_start": 1.5, "started_at": "2026-01-01T00:00:00Z"}
    data[field] = value
    with pytest.raises(Corrupt) as info:
        Holder.from_json(data, "the.lock")
    assert info.value.context["field"] == field
    assert info.value.context["rule"] in ("type", "datetime")
    assert field in info.value.message


def _plant(root: Path, pid: int) -> Path:
    lock = _ck(root) / f"{NAME}.lock"
    host = os.uname().nodename
    lock.write_text(f"pid: {pid}\nhost: {host}\nprocess_start: abc\nstarted_at: '2026-01-01T00:00:00Z'\n")
    return lock


def test_a_damaged_lock_naming_a_running_process_is_refused_with_the_field(tmp_path: Path) -> None:
    root, marker = tmp_path / "store", tmp_path / "ran"
    holder = subprocess.Popen(["sleep", "60"])
    try:
        lock = _plant(root, holder.pid)
        before = lock.read_bytes()
        env = cli_env(root)
        res = cli("guard", "run", "--name", NAME, "--", "touch", str(marker), env=env)
        assert res.rc == 1, res.out + res.err
        assert (res.json["error_code"], res.json["field"], res.json["rule"]) == ("corrupt", "process_start", "type")
        assert f"pid {holder.pid}" in res.json["error"]
        assert not marker.exists()
        assert lock.read_bytes() == before
        st = cli("guard", "status", "--name", NAME, env=env)
        assert st.rc == 0
        assert st.json["lock"]["field"] == "process_start"
        assert "process_start" in st.json["lock"]["damaged"]
    finally:
        holder.kill()
        holder.wait()


def test_a_damaged_lock_naming_a_dead_process_is_replaced_with_a_note(tmp_path: Path) -> None:
    root, marker = tmp_path / "store", tmp_path / "ran"
    gone = subprocess.Popen(["true"])
    gone.wait()
    _plant(root, gone.pid)
    res = cli("guard", "run", "--name", NAME, "--", "touch", str(marker), env=cli_env(root))
    assert res.rc == 0, res.out + res.err
    assert marker.exists()
    assert "damaged lock file replaced" in res.err
    assert "process_start" in res.err


# -- durations -------------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--stale-after", "--cooldown"])
@pytest.mark.parametrize("value", ["99999999999d", "9" * 400, "36501d", "1" + "0" * 330 + "w"])
def test_absurd_durations_are_usage_errors_naming_the_option(tmp_path: Path, option: str, value: str) -> None:
    res = cli("guard", "run", "--name", NAME, option, value, "--", "true", env=cli_env(tmp_path / "store"))
    assert res.rc == 2, res.out + res.err
    assert (res.json["error_code"], res.json["field"], res.json["rule"]) == ("usage", option, "duration_max")
    assert not (tmp_path / "store").exists()


@given(st.from_regex(r"\A\d{1,30}(\.\d{1,5})?(ms|s|m|h|d|w)?\Z"))
def test_a_duration_is_a_timedelta_within_the_bound_or_a_usage_error(text: str) -> None:
    error: UsageError | None = None
    try:
        td = parse_duration(text, field="--x")
    except UsageError as exc:
        error = exc
    if error is not None:
        assert (error.context["field"], error.context["rule"]) == ("--x", "duration_max")
    else:
        assert td.total_seconds() <= MAX_DAYS * 86400
