"""/extensions: Nova's names of what is served here, and only those."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def test_the_extensions_served_are_listed_and_shown_by_alias():
    harness = Harness.new()
    listed = harness.call("GET", "/v2.1/extensions").json["extensions"]
    aliases = {e["alias"] for e in listed}
    assert {"os-hosts", "os-keypairs", "os-flavor-access", "os-aggregates",
            "os-migrations", "os-simple-tenant-usage", "os-user-quotas"} <= aliases
    # What we do not serve is not claimed.
    assert not aliases & {"os-volumes", "os-rescue", "os-cells"}
    shown = harness.call("GET", "/v2.1/extensions/os-hosts").json["extension"]
    assert (shown["name"], shown["links"]) == ("Hosts", [])
    assert harness.call("GET", "/v2.1/extensions/os-rescue").status_int == 404
    # Listed on every Nova cloud, whatever it serves (and promising no API here either).
    assert harness.call("GET", "/v2.1/extensions/os-consoles").json["extension"][
        "name"] == "Consoles"
    assert harness.call("GET", "/v2.1/os-consoles").status_int == 404
