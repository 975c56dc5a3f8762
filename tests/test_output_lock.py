"""Two calibrations writing the same --out: the second is refused while the first runs; a lock its writer left
behind (killed) is taken over."""

import json
import subprocess
import sys

from conftest import one_line_error, run

from scenarios.output_lock import lock_path, writing


def test_a_second_calibration_to_the_same_out_is_refused_while_the_first_runs(tmp_path):
    out = tmp_path / "p.json"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock_path(out).write_text(json.dumps({"pid": other.pid, "started": "2026-12-05T09:00:00+00:00"}))
        one_line_error(run("calibrate", "--quick", "--out", str(out)), "being written by another calibration",
                       f"process {other.pid}", "another --out")
        assert not out.exists() and lock_path(out).exists()  # the first writer's lock is left alone
    finally:
        other.kill()
        other.wait()
    with writing(out):  # its writer is gone: the stale lock is taken over, and removed at the end
        assert json.loads(lock_path(out).read_text())["pid"] != other.pid
    assert not lock_path(out).exists()


def test_the_lock_is_removed_when_the_work_fails(tmp_path):
    out = tmp_path / "sub" / "p.json"
    try:
        with writing(out):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert not lock_path(out).exists()
