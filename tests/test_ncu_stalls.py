"""bench/ncu_stalls.py reads Nsight Compute's source page (CSV, SASS) and ranks where the warps wait (no GPU).

The fixture is seven rows of a real export (bench/RESULTS.md, the 8x8 SIMT GEMM's main loop on the H200).
"""

from __future__ import annotations

from pathlib import Path

from bench.ncu_stalls import read, report

FIXTURE = Path(__file__).parent / "fixtures" / "ncu" / "matmul_simt_source_sass.csv"


def test_samples_are_summed_per_state_over_the_instructions() -> None:
    [kernel] = read(FIXTURE)
    assert kernel.name == "matmul_simt" and len(kernel.instructions) == 7
    by_address = {address: states for address, _, states in kernel.instructions}
    assert by_address["0x7f08097c5670"]["barrier"] == 21027  # the instruction after BAR.SYNC
    assert by_address["0x7f08097c3810"]["short_sb"] == 9284  # an FFMA waiting for its LDS
    for state in ("barrier", "short_sb", "long_sb"):
        assert kernel.totals[state] == sum(states.get(state, 0.0) for states in by_address.values())
    assert all("(Not Issued)" not in state for state in kernel.totals)


def test_the_report_ranks_instructions_by_stalled_samples_not_by_issued_ones() -> None:
    [kernel] = read(FIXTURE)
    lines = report(kernel, top=3)
    ranked = [line.split("|")[2].strip(" `") for line in lines if line.startswith("| 0x")]
    assert ranked == ["UMOV UR4, UR6", "FFMA.FTZ R89, R48, R44, R89", "STS [R12], R32"]
    # LDS.128 at 0x...44b0 has many samples, nearly all "not_selected" (ready, not picked): not a stall.
    assert not any("LDS.128" in r for r in ranked)


def test_a_file_without_a_kernel_line_reads_as_no_kernels(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text('"Address","Source"\n"0x1","NOP"\n')
    assert read(bad) == []
