"""virt/__init__.py: importing the libvirt building blocks stops libvirt printing its errors
on stderr: each reaches us as an exception, reported in one line, and nothing else is said."""

from __future__ import annotations

import libvirt
import pytest

import etcd_compute.virt  # noqa: F401 (what is tested: the import)


def test_a_libvirt_error_is_raised_and_not_printed(capfd):
    connection = libvirt.open("test:///default")  # libvirt's in-process test driver
    try:
        with pytest.raises(libvirt.libvirtError, match="Domain not found"):
            connection.lookupByName("no-such-domain")
    finally:
        connection.close()
    assert capfd.readouterr() == ("", "")  # libvirt's own handler writes on fd 2
