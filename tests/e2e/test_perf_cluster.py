"""`pulsar-grpc perf cluster`, run tiny so that it cannot rot: it starts ZooKeeper, PostgreSQL,
the standalone baseline and 1 then 2 brokers, and unloads a bundle under load. The report must
add up (no timing assertions: the machine is shared)."""

from __future__ import annotations

import pytest

from tests.e2e.test_perf import perf

PARTITIONS = 4


@pytest.mark.timeout(240)
def test_cluster_reports_scaling_and_an_unload(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = perf(
        capsys, "cluster", "--brokers", "1,2", "--partitions", str(PARTITIONS), "-k", "1",
        "--duration", "1", "--blocked", "unload", "--repeat", "1",
    )  # fmt: skip
    assert report["machine"]["nproc"] >= 1 and len(report["machine"]["load_after"]) == 3
    rows = report["throughput"]
    assert [r["brokers"] for r in rows] == ["standalone", 1, 2]
    for row in rows:
        # Every message produced was consumed: the consumers ran on the same topic, whichever
        # broker owned each partition.
        assert row["produced"] == row["consumed"] > 0, row
        assert row["errors"] == 0
        assert row["produce_msg_per_s"] > 0 and row["consume_msg_per_s"] > 0
        assert 0 < row["produce_p50_ms"] <= row["produce_p99_ms"]
        assert sum(row["partitions_per_broker"]) == PARTITIONS
        # What the machine's cores went to: the brokers, and the load processes.
        assert row["brokers_cpu_s"] > 0 and row["load_cpu_s"] > 0 and row["wall_s"] > 0
    assert rows[0]["partitions_per_broker"] == [PARTITIONS]  # the standalone owns all
    assert rows[1]["produce_ratio"] == rows[1]["consume_ratio"] == 1.0  # the ratios' base
    assert len(rows[2]["partitions_per_broker"]) <= 2
    (unload,) = report["blocked"]
    assert unload["disruption"] == "unload"
    (run,) = unload["runs"]
    assert run["partitions_hit"] and 0 in run["partitions_hit"]
    # The bundle's producers were blocked for a while by the unload, then got receipts again.
    assert run["call_s"] > 0 and run["gap_s"] > 0 and run["first_receipt_s"] > 0
    assert len(run["gap_per_producer_s"]) == len(run["partitions_hit"])
    assert max(run["gap_per_producer_s"]) == run["gap_s"]
    assert unload["gap_s"] == {"p50": run["gap_s"], "max": run["gap_s"]}
