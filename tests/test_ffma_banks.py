"""bench/ffma_banks.py finds a kernel's main loop in SASS and counts its FFMAs' register-bank conflicts (no GPU)."""

from __future__ import annotations

from bench.ffma_banks import conflicts, main_loop

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                      /* 0x00000a0000017a02 */
        /*0010*/                   LDS.128 R4, [R2] ;                          /* 0x0000000002047984 */
        /*0020*/                   FFMA R8, R4.reuse, R6, R8 ;                 /* 0x0000000604087223 */
        /*0030*/                   FFMA R9, R4, R7, R10 ;                      /* 0x0000000704097223 */
        /*0040*/                   FFMA R11, R5, R7, R9 ;                      /* 0x00000007050b7223 */
        /*0050*/                   FFMA R12, R4, R6, R8 ;                      /* 0x00000006040c7223 */
        /*0060*/               @P0 BRA 0x10 ;                                  /* 0x000000000000 */
        /*0070*/                   FFMA R13, R2, R4, R6 ;                      /* 0x000000000000 */
        /*0080*/                   EXIT ;                                      /* 0x000000000000 */
"""


def test_the_main_loop_is_the_longest_backward_branch() -> None:
    loop = main_loop(SASS)
    assert [op for op, _ in loop] == ["LDS.128", "FFMA", "FFMA", "FFMA", "FFMA", "BRA"]


def test_an_ffma_conflicts_when_two_of_its_non_reused_sources_share_a_bank() -> None:
    # R6/R8 (both even, R4 reused): conflict. R4, R7, R10: one odd, two even: conflict. R5, R7, R9: all odd.
    # R4, R6, R8: all even. Four FFMAs, all four conflict; the FFMA after the loop is not counted.
    assert conflicts(main_loop(SASS)) == (4, 4)
    clean = SASS.replace("FFMA R8, R4.reuse, R6, R8", "FFMA R8, R4.reuse, R7, R8")
    assert conflicts(main_loop(clean)) == (4, 3)
