"""What schedule.py prints (cli/output.py): tables, rows, progress lines, no valid host,
errors; text from elsewhere escaped."""

from __future__ import annotations

import json

from etcd_compute.cli import output
from etcd_compute.errors import NoValidHost


def test_a_table_pads_columns_to_the_widest_cell_and_escapes_cells(capsys):
    output.table([["web-1", "ACTIVE"], ["a\x1b[2J", "ERROR"]], ["NAME", "STATE"])
    assert capsys.readouterr().out.splitlines() == [
        "NAME      STATE", "web-1     ACTIVE", "a\\x1b[2J  ERROR"]


def test_rows_pad_their_keys():
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        output.rows([("name", "lab2"), ("unreachable", "-\nx")])
    assert printed.getvalue() == "name         lab2\nunreachable  -\\x0ax\n"


def test_progress_says_where_an_instance_is_and_how_it_ended(capsys):
    output.progress("u1", {"state": "ACTIVE", "ip": "10.0.0.5", "host_name": "hv1"})
    output.progress("u2", {"state": "ERROR", "error": "disk\x1b[2J full", "host": "rp"})
    output.progress("u3", {"state": "BUILDING"})
    output.progress("u4", None)
    assert capsys.readouterr().out.splitlines() == [
        "u1 ACTIVE on hv1 ip=10.0.0.5", "u2 ERROR on rp error=disk\\x1b[2J full",
        "u3 BUILDING on -", "u4 GONE"]
    assert output.progress_of(True) is output.quiet
    assert output.progress_of(False) is output.progress


def test_no_valid_host_is_exit_1_with_one_reason_a_line(capsys):
    exc = NoValidHost(["no host has 64 VCPU", "hv2: disabled\x07"])
    assert output.no_valid_host(False, exc) == 1
    assert capsys.readouterr().out == (
        "NO ALLOCATIONS LEFT\nno host has 64 VCPU\nhv2: disabled\\x07\n")
    assert output.no_valid_host(True, exc) == 1
    assert json.loads(capsys.readouterr().out) == {
        "error": "NO ALLOCATIONS LEFT", "reasons": ["no host has 64 VCPU", "hv2: disabled\x07"]}


def test_errors_and_notes_are_one_line_on_stderr(capsys):
    output.error("stop of u1 failed: x\ny")
    output.note("zone lab2 unreachable")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("schedule.py: error: stop of u1 failed: x\\x0ay\n"
                            "schedule.py: zone lab2 unreachable\n")


def test_when_and_resources_text():
    assert output.when(None) == "-" and output.when(0) == "-"
    assert len(output.when(1_700_000_000.0)) == len("2023-11-14 22:13:20")
    assert output.resources_text({"VCPU": 1, "MEMORY_MB": 512}) == "MEMORY_MB:512,VCPU:1"
    assert output.resources_text(None) == "-"
