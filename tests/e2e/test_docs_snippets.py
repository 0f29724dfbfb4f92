"""Every code block of the README and docs/*.md does what it says, as a reader would run it.

Each ```python block runs as a script with the venv's python, each ```bash block with bash
(`set -euo pipefail`, the venv's bin first on PATH), in a scratch directory where `.venv` is the
venv running the tests, against a broker started for the test: the documented addresses
(``127.0.0.1:50051``, ``http://127.0.0.1:8080``) in the block are replaced by that broker's,
and the CLI's ``PULSAR_GRPC_SERVICE_URL`` / ``PULSAR_GRPC_ADMIN_URL`` point at it for commands
that rely on the defaults. A Python block runs twice against the same broker, so it must work on
an empty broker and on one it already used (fresh names or earliest positions, receives with a
timeout). ```properties blocks must load as a broker.conf.

A block that cannot run as a script says why, right above it, where a reader sees it::

    <!-- snippet: not run — the reason -->

Spark blocks are marked ``<!-- snippet: spark -->``. The Python ones run one after the other in
one interpreter (``test_spark_python_snippets_run``), each as its own ``__main__`` through
``runpy``, so they share one JVM: starting a JVM per block cost ~15-40 s each. A bash Spark
block starts its own Spark and runs in ``test_spark_snippet_runs``. A marker this module does
not understand, or a block without a language, fails ``test_every_block_is_checked_or_says_why``.
A test file the docs cite (docs/semantics.md's "tested in" column) must exist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest
from _pytest.mark import ParameterSet

from pulsar_grpc.broker.config import load_config
from pulsar_grpc.cli.endpoints import (
    ADMIN_URL_ENV,
    SERVICE_URL_ENV,
    STANDALONE_ADMIN_URL,
    STANDALONE_SERVICE_URL,
)
from tests.faultproxy import free_port
from tests.support import BrokerThread

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_GRPC_ADDRESS = STANDALONE_SERVICE_URL.removeprefix("grpc://")
SCRIPTS = ("python", "bash")

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"<!--\s*snippet:(?P<body>.*?)-->")
MARKER_BODY = re.compile(r"^ (?:(?P<spark>spark)|not run (?:—|--) (?P<reason>\S.*?)) $")


class Run(Enum):
    """What the suite does with a block."""

    SCRIPT = "runs as a script"
    SPARK = "runs as a script, in the Spark test"
    NOT_RUN = "not run, for the reason its marker gives"
    CONFIG = "loads as a broker.conf"
    NOTHING = "not a script (JSON, text)"


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None  # the marker's body, None when the block has none

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def run(self) -> Run:
        match = MARKER_BODY.match(self.marker) if self.marker is not None else None
        if match is not None and match["reason"]:
            return Run.NOT_RUN
        if match is not None and match["spark"]:
            return Run.SPARK
        if self.lang in SCRIPTS:
            return Run.SCRIPT
        return Run.CONFIG if self.lang == "properties" else Run.NOTHING


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the snippet marker right above it."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip() == fence),
            None,
        )
        assert end is not None, f"{path.name}:{i + 1}: unclosed code block"
        before = lines[i - 1].strip() if i > 0 else ""
        marker = MARKER.fullmatch(before)
        blocks.append(
            Block(
                path=path,
                line=i + 1,
                lang=opening["lang"],
                code="\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n",
                marker=marker["body"] if marker else None,
            )
        )
        i = end + 1
    return blocks


BLOCKS = [block for path in DOCS for block in blocks_of(path)]


def blocks(run: Run) -> list[ParameterSet]:
    return [pytest.param(b, id=b.name) for b in BLOCKS if b.run is run]


def test_every_block_is_checked_or_says_why() -> None:
    """No block escapes silently: each has a language, and each marker is one this module
    acts on, right above a script block, a 'not run' one with its reason."""
    problems = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        marked = {b.line - 1 for b in blocks_of(path) if b.marker is not None}
        for number, line in enumerate(lines, 1):
            if MARKER.search(line) and number not in marked:
                problems.append(f"{path.name}:{number}: a snippet marker not right above a block")
    for block in BLOCKS:
        if not block.lang:
            problems.append(f"{block.name}: a block without a language")
        if block.marker is not None and MARKER_BODY.match(block.marker) is None:
            problems.append(
                f"{block.name}: unknown marker {block.marker!r} "
                "(want 'spark' or 'not run — <reason>')"
            )
        if block.marker is not None and block.lang not in SCRIPTS:
            problems.append(f"{block.name}: a marker on a {block.lang or 'plain'} block")
    assert not problems, "\n".join(problems)
    assert blocks(Run.SCRIPT), "found no runnable block: the extraction is broken"


# Ports of servers the blocks start themselves (the README's proxy: gRPC, then web).
DOC_OWN_PORTS = (6660, 8190)


def render(block: Block, broker: BrokerThread) -> str:
    """The block's code as it runs against ``broker``: its documented addresses replaced."""
    code = block.code.replace(STANDALONE_ADMIN_URL, broker.http_url)
    code = code.replace(DOC_GRPC_ADDRESS, broker.grpc_address)
    # Other servers a block starts itself (the README's proxy) get free ports too.
    for fixed in DOC_OWN_PORTS:
        code = re.sub(rf"\b{fixed}\b", str(free_port()), code)
    return code


def run_block(block: Block, broker: BrokerThread, workdir: Path, timeout: float) -> str:
    """Run one block as a reader would, against ``broker``; returns its output."""
    code = render(block, broker)
    if block.lang == "python":
        script = workdir / "snippet.py"
        command = [sys.executable, str(script)]
    else:
        script = workdir / "snippet.sh"
        command = ["bash", "-euo", "pipefail", str(script)]
    script.write_text(code)
    return run_script(command, code, block.name, broker, workdir, timeout)


def run_script(
    command: list[str], code: str, name: str, broker: BrokerThread, workdir: Path, timeout: float
) -> str:
    """Run ``command`` in ``workdir`` with the venv and the CLI's defaults pointing at
    ``broker``; fails with the code and both outputs unless it exits 0 quietly."""
    venv = Path(sys.prefix)
    if not (workdir / ".venv").exists():
        (workdir / ".venv").symlink_to(venv, target_is_directory=True)
    env = os.environ.copy()
    # this checkout's code, whichever checkout the venv was installed from
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "protos"), env.get("PYTHONPATH", "")) if p
    )
    env[SERVICE_URL_ENV] = broker.service_url
    env[ADMIN_URL_ENV] = broker.http_url
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    result = subprocess.run(
        command,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = f"--- {name} as run:\n{code}--- stdout:\n{result.stdout}--- stderr:\n{result.stderr}"
    assert result.returncode == 0, f"exit code {result.returncode}\n{output}"
    for noise in ("Traceback", "Task was destroyed", "Exception ignored"):
        assert noise not in result.stderr, f"{noise!r} on stderr\n{output}"
    return result.stdout


CITED_TEST = re.compile(r"(?:tests/)?(?:(?P<dir>e2e|unit|ported)/)?(?P<name>test_\w+\.py)")


def test_the_tests_the_docs_cite_exist() -> None:
    """docs/semantics.md's "tested in" column and the like name test files, in tests/e2e/
    unless they say unit/: a renamed or moved test must not leave the docs pointing nowhere."""
    missing = sorted(
        f"{path.relative_to(ROOT)}: {cited[0]}"
        for path in DOCS
        for cited in CITED_TEST.finditer(path.read_text())
        if not (ROOT / "tests" / (cited["dir"] or "e2e") / cited["name"]).is_file()
    )
    assert not missing, "\n".join(missing)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", blocks(Run.SCRIPT))
def test_snippet_runs(block: Block, broker: BrokerThread, tmp_path: Path) -> None:
    run_block(block, broker, tmp_path, timeout=120)
    if block.lang == "python":
        run_block(block, broker, tmp_path, timeout=120)  # again, on a broker it already used


SPARK_BLOCKS = [b for b in BLOCKS if b.run is Run.SPARK]

# Runs each script named on its command line as __main__, in order, in this one interpreter.
SPARK_RUNNER = """\
import runpy
import sys

for script in sys.argv[1:]:
    print(f"=== {script}", flush=True)
    print(f"=== {script}", file=sys.stderr, flush=True)
    runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.timeout(900)
def test_spark_python_snippets_run(broker: BrokerThread, tmp_path: Path) -> None:
    """Every Python Spark block, in one interpreter and so one JVM; the output's ``===``
    lines say which block was running when one fails."""
    python_blocks = [b for b in SPARK_BLOCKS if b.lang == "python"]
    assert python_blocks, "found no Python Spark block: the extraction is broken"
    scripts, codes = [], []
    for number, block in enumerate(python_blocks):
        code = render(block, broker)
        script = tmp_path / f"spark_snippet_{number}.py"
        script.write_text(code)
        scripts.append(str(script))
        codes.append(f"# {script.name} = {block.name}\n{code}")
    runner = tmp_path / "run_snippets.py"
    runner.write_text(SPARK_RUNNER)
    command = [sys.executable, str(runner), *scripts]
    run_script(command, "\n".join(codes), "the Python Spark blocks", broker, tmp_path, 780)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.name) for b in SPARK_BLOCKS if b.lang != "python"]
)
def test_spark_snippet_runs(block: Block, broker: BrokerThread, tmp_path: Path) -> None:
    run_block(block, broker, tmp_path, timeout=300)


@pytest.mark.parametrize("block", blocks(Run.CONFIG))
def test_broker_conf_block_loads(block: Block, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(block.code)
    load_config(conf, {}, {})


def test_the_cli_takes_its_default_addresses_from_the_environment() -> None:
    """What lets the README's commands, written without flags, reach the test's broker: with
    the variables set, the commands go where they say, not to the standalone addresses."""
    nowhere = f"127.0.0.1:{free_port()}"
    env = {**os.environ, SERVICE_URL_ENV: f"grpc://{nowhere}", ADMIN_URL_ENV: f"http://{nowhere}"}
    command = [sys.executable, "-m", "pulsar_grpc.cli.main"]
    admin = subprocess.run(
        [*command, "topics", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert admin.returncode == 1 and f"cannot reach http://{nowhere}" in admin.stderr, admin
    produce = subprocess.run(
        [*command, "produce", "t", "-m", "x", "--operation-timeout-ms", "500"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert produce.returncode == 1 and f"grpc://{nowhere}" in produce.stderr, produce
