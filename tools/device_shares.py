"""How many checks one device's memory holds at once: its memory in ``DEVICE_SLOTS`` equal shares.

A check takes as many shares as its working set needs and runs beside other checks while the shares
in use add up to no more than the device has. Counting shares rather than checks keeps several
mid-sized KernelBench problems (each a fifth of an 80 GB GPU) from running it out of memory together,
while the many small problems still share it four at a time. A check that needs every share runs alone.
"""

from __future__ import annotations

import math

DEVICE_SLOTS = 4


def slots_for(working_set_bytes: int, available_bytes: int) -> int:
    """The shares of a device of ``available_bytes`` that a check of ``working_set_bytes`` holds."""
    if available_bytes <= 0:
        return DEVICE_SLOTS
    return min(DEVICE_SLOTS, max(1, math.ceil(working_set_bytes * DEVICE_SLOTS / available_bytes)))
