"""The package map in pyproject.toml: everything installs under ``pulsar_grpc`` (nothing generic
such as ``client`` lands in a user's site-packages), and no package folder is left out of it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pulsar_grpc

ROOT = Path(__file__).resolve().parents[2]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_installed_under_pulsar_grpc() -> None:
    setuptools = _setuptools()
    listed = set(setuptools["packages"])
    expected = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            expected.add(".".join([name, *relative.parts]))
    assert expected - listed == set(), "package folders missing from [tool.setuptools] packages"
    assert {name.split(".")[0] for name in listed} == {"pulsar_grpc", "pulsargrpc"}


def test_the_checkout_links_match_the_package_map() -> None:
    """pulsar_grpc/ in a checkout holds one link per mapped folder, so tools run from the root
    import exactly what an installed package holds."""
    for name, folder in _setuptools()["package-dir"].items():
        parts = name.split(".")
        if parts[0] != "pulsar_grpc" or len(parts) != 2:
            continue
        link = ROOT / "pulsar_grpc" / parts[1]
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve(), link


def test_the_sdk_is_the_package_namespace() -> None:
    from pulsar_grpc.client import Client, __all__

    assert pulsar_grpc.Client is Client
    assert set(pulsar_grpc.__all__) == set(__all__)
    assert (ROOT / "pulsar_grpc" / "py.typed").exists()


def test_pulsar_client_exception_imports_port_unchanged() -> None:
    from pulsar_grpc.exceptions import PulsarException, Timeout, TopicNotFound

    assert issubclass(Timeout, PulsarException) and issubclass(TopicNotFound, PulsarException)
    assert pulsar_grpc.Timeout is Timeout


def test_the_console_assets_are_package_data() -> None:
    """The console's page, script and stylesheet (broker/web/console/) match the package-data
    globs of pulsar_grpc.broker.web, so a built wheel carries them beside the code that serves
    them (setuptools matches each glob against the path relative to the package folder)."""
    import fnmatch

    globs = _setuptools()["package-data"]["pulsar_grpc.broker.web"]
    web = ROOT / _setuptools()["package-dir"]["pulsar_grpc.broker"] / "web"
    assets = [p.relative_to(web).as_posix() for p in (web / "console").iterdir()]
    assert {"console/index.html", "console/console.js", "console/console.css"} <= set(assets)
    for asset in assets:
        assert any(fnmatch.fnmatch(asset, g) for g in globs), f"{asset} is not package data"
