"""What ``docker-compose.yml`` publishes on the host, read as YAML (anchors and merge keys resolved as compose
resolves them)."""

from __future__ import annotations

import yaml

from tests.conftest import ROOT


def _published_host_addresses(service: dict) -> list[str]:
    """The host address each of ``service``'s published ports listens on, as written (short syntax
    ``[HOST:]HOST_PORT:CONTAINER_PORT``, or the long syntax's ``host_ip``); "" when it names none (every interface)."""
    addresses = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            addresses.append(str(port.get("host_ip", "")))
        else:
            parts = str(port).rsplit(":", 2)
            addresses.append(parts[0] if len(parts) == 3 else "")
    return addresses


def test_prometheus_is_published_on_the_hosts_loopback_only_whatever_prefeed_bind_says():
    # given the compose file
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    # when Prometheus's published ports are read, then each listens on 127.0.0.1, written as such: its UI and HTTP
    # API have no authentication, so PREFEED_BIND=0.0.0.0 (which publishes the proxy everywhere) must not reach it
    addresses = _published_host_addresses(services["prometheus"])
    assert addresses and all(a == "127.0.0.1" for a in addresses), addresses
    # while the proxy follows PREFEED_BIND, 127.0.0.1 by default
    assert _published_host_addresses(services["proxy"]) == ["${PREFEED_BIND:-127.0.0.1}"]
