"""Session-wide fixtures: real servers on 127.0.0.1 (see tests/servers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.hubserver import HubServer, run_hub
from tests.servers import (
    AzureServer,
    FaultProxy,
    GcsServer,
    NginxServer,
    S3Server,
    run_azurite,
    run_fault_proxy,
    run_gcs_emulator,
    run_moto,
    run_nginx,
)

#: Fixtures that start a real server; a test using one (directly or through another fixture) is
#: marked ``server`` so ``make test-fast`` (``-m "not server"``) runs everything else.
SERVER_FIXTURES = frozenset(
    {"nginx_server", "s3_server", "gcs_server", "azure_server", "fault_proxy", "hub_server"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


@pytest.fixture(scope="session", autouse=True)
def _isolated_feedline_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Caches of the suite never touch the user's real ~/.cache/feedline."""
    mp = pytest.MonkeyPatch()
    mp.setenv("FEEDLINE_HOME", str(tmp_path_factory.mktemp("feedline-home")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def nginx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxServer]:
    with run_nginx(tmp_path_factory.mktemp("nginx")) as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with run_moto() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    with run_gcs_emulator() as server:
        yield server


@pytest.fixture(scope="session")
def azure_server() -> Iterator[AzureServer]:
    with run_azurite() as server:
        yield server


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """The Hub-contract server (tests/hubserver.py); each test adds its own repositories."""
    with run_hub(tmp_path_factory.mktemp("hub")) as server:
        yield server


@pytest.fixture
def hub(hub_server: HubServer, tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """The Hub server as the Hub: HF_ENDPOINT (feedline and huggingface_hub), regular uploads,
    online, and no token but the test's own (not the machine's stored one)."""
    from huggingface_hub import constants

    no_token = tmp_path_factory.mktemp("no-hf-token") / "token"
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_TOKEN_PATH", str(no_token))
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # huggingface_hub reads these once at import; the suite may have imported it already
    monkeypatch.setattr(constants, "ENDPOINT", hub_server.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub_server.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_URL_HOSTS", constants.HF_URL_HOSTS | {"127.0.0.1"})
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(no_token))
    hub_server.clear()
    yield hub_server
    hub_server.clear()


@pytest.fixture
def fault_proxy(nginx_server: NginxServer) -> Iterator[FaultProxy]:
    with run_fault_proxy(nginx_server.url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local Ray for a test module: one CPU, no dashboard, no driver log."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'feedline[ray]')")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
