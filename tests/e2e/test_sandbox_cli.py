"""`persyn sandbox` and the sandbox in `persyn doctor` / `persyn tools` through the real CLI and
real bubblewrap: the probes run inside and everything is isolated; a mistyped network stops
the command naming the value; with no provider `run_code` is not offered and doctor says why;
`persyn tools call run_code` delegates to the sandbox agent (a `test:script` double) and
meters its calls to the usage log."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from persyn_cli import Persyn

import needs
from persyn.tools.sandbox._pids_cgroup import PidsCgroup

pytestmark = pytest.mark.e2e
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason=needs.reason("bubblewrap (bwrap)"))


def _configure(persyn: Persyn, text: str) -> None:
    config = persyn.home / "persyn.toml"
    config.write_text(config.read_text().replace("\n[sandbox]\n", f"\n[sandbox]\n{text}\n", 1))


@needs_bwrap
def test_sandbox_check_probes_from_inside_and_reports_isolation(persyn: Persyn) -> None:
    done = persyn.run("sandbox", "check", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["provider"] == "bubblewrap" and report["network"] == "none"
    assert [(p["name"].split(" (")[0], p["isolated"]) for p in report["probes"]] == [
        ("write outside the workspace", True),
        ("TCP to the host's loopback", True),
        ("open an IP socket", True),
        ("read the host's home", True),
        # Root is exempt from RLIMIT_NPROC: the limit then holds only through a writable pids
        # cgroup (`tools/sandbox/_pids_cgroup.py`), and the probe must say whether it held.
        ("more than 64 processes", os.geteuid() != 0 or PidsCgroup.find() is not None),
        ("write past the workspace quota", True),
    ]
    text = persyn.run("sandbox", "check")
    assert text.returncode == 0 and "NOT ISOLATED" not in text.stdout
    assert text.stdout.startswith("provider: bubblewrap (")
    tools = json.loads(persyn.run("tools", "list", "--json").stdout)
    assert "run_code" in {t["name"] for t in tools["tools"]}


def test_a_mistyped_network_stops_the_command_naming_it(persyn: Persyn) -> None:
    _configure(persyn, 'network = "lopback"')
    named = "[sandbox] network 'lopback' is not one of none, loopback, full"
    done = persyn.run("sandbox", "check")
    assert done.returncode == 2 and named in done.stderr, done.stdout
    doctor = persyn.run("doctor")
    assert doctor.returncode == 1 and named in doctor.stdout


def test_no_provider_no_run_code_and_doctor_says_why(persyn: Persyn) -> None:
    if shutil.which("runsc") is not None:
        pytest.skip("runsc is installed here")
    _configure(persyn, 'provider = "runsc"')
    done = persyn.run("sandbox", "check")
    assert done.returncode == 1
    assert "no sandbox provider: runsc: 'runsc' is not installed" in done.stdout
    assert "no host fallback" in done.stderr
    doctor = persyn.run("doctor")
    line = next(line for line in doctor.stdout.splitlines() if "sandbox:" in line)
    assert "no provider, so run_code is not offered: runsc: 'runsc' is not installed" in line
    tools = json.loads(persyn.run("tools", "list", "--json").stdout)
    assert "run_code" not in {t["name"] for t in tools["tools"]}


@needs_bwrap
def test_tools_call_run_code_delegates_and_is_metered(persyn: Persyn, tmp_path: Path) -> None:
    rules = tmp_path / "sandbox-rules.json"
    rules.write_text(
        json.dumps(
            [
                {
                    "task": "sandbox",
                    "match": "primes",
                    "times": 1,
                    "tool_calls": [
                        {
                            "name": "run_command",
                            "args": {
                                "command": "python3 -c 'print([n for n in range(2, 30) if all(n % d for d in range(2, n))])' | tee primes.txt"
                            },
                        }
                    ],
                },
                {"task": "sandbox", "reply": "Wrote primes.txt."},
            ]
        )
    )
    done = persyn.run(
        "tools",
        "call",
        "run_code",
        "--args",
        json.dumps({"task": "List the primes below 30."}),
        "--json",
        PERSYN_MODELS__SANDBOX=f"test:script@{rules}",
    )
    assert done.returncode == 0, done.stderr + done.stdout
    output = json.loads(done.stdout)["output"]
    assert output["report"] == "Wrote primes.txt." and output["model_calls"] == 2
    assert output["steps"][0].endswith("→ exit 0")
    # The operator's channel has its workspace; the file is in it (its archive).
    (workspace,) = json.loads(persyn.run("sandbox", "list", "--json").stdout)
    assert workspace["compartment"]["channels"] == ["cli:operator"] and workspace["files"] == 1
    (agent,) = (persyn.home / "data" / "sandbox").iterdir()
    with tarfile.open(agent / workspace["key"] / "workspace.tar") as archive:
        member = archive.extractfile("./primes.txt")
        assert member is not None and member.read() == b"[2, 3, 5, 7, 11, 13, 17, 19, 23, 29]\n"
    usage = persyn.run("usage", "--json")
    assert usage.returncode == 0, usage.stderr
    assert '"sandbox"' in usage.stdout
    reset = persyn.run("sandbox", "reset")
    assert reset.returncode == 0 and reset.stdout.startswith("removed 1 sandbox workspace of Ada")
    assert not (agent / workspace["key"]).exists()
