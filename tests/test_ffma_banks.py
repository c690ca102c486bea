"""bench/ffma_banks.py finds a kernel's main loop in SASS and counts its FFMAs' register-bank conflicts (no GPU)."""

from __future__ import annotations

from bench.ffma_banks import conflicts, load_distances, main_loop

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


LOADS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128.CONSTANT R20, desc[UR4][R2.64] ;
        /*0020*/                   LDS.128 R4, [R2] ;
        /*0030*/                   FFMA R8, R12, R1, R8 ;
        /*0040*/                   FFMA R9, R5, R7, R9 ;
        /*0050*/                   STS.128 [R3], R20 ;
        /*0060*/                   LDS R12, [R2+0x10] ;
        /*0070*/               @P0 BRA 0x10 ;
        /*0080*/                   EXIT ;
"""


def test_a_load_is_measured_to_its_first_reader_around_the_loop() -> None:
    # LDS.128 R4..R7 is first read two instructions later (R5); LDS R12 at the loop's end is read by the loop's
    # third instruction of the next pass, four later; the global load sits first in the loop.
    assert load_distances(main_loop(LOADS)) == ([2, 4], [0])
    # With the FFMA reading other registers, R4..R7's first reader is the store of R6 (a store reads all its
    # registers), one instruction further.
    later = LOADS.replace("FFMA R9, R5, R7, R9", "FFMA R9, R0, R1, R9").replace("STS.128 [R3], R20", "STS [R3], R6")
    assert load_distances(main_loop(later)) == ([3, 4], [0])
