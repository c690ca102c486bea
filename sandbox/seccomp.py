"""System calls the runner's process tree may not make: a seccomp filter, installed before any candidate code runs.

The judge stops the runner's whole process group (``SIGSTOP``) whenever the runner is not answering, so that nothing
of the candidate's runs while the references are computed or timed. A process that leaves the group escapes that:
a child that calls ``setsid`` would spin on a core while the reference is timed and slow it (a faster "speedup").
The filter refuses, with ``EPERM``:

- ``setsid`` and ``setpgid``: the group stays whole, so every process and thread of the candidate stops with it;
- ``ptrace``, ``process_vm_readv`` and ``process_vm_writev``: no reading or writing another process's memory (the
  judge is undumpable too; this holds for any process of the same user);
- any system call of the x32 ABI on x86-64 (numbers with bit 30 set), which would otherwise reach the same calls
  under other numbers.

A seccomp filter is inherited by every child and thread and cannot be removed; ``no_new_privs`` (required to
install one without privileges) is set first.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
ARCH_OFFSET, NR_OFFSET = 4, 0  # in struct seccomp_data
X32_BIT = 0x40000000

# (audit architecture, {name: number}) per machine this runs on.
REFUSED = ("setsid", "setpgid", "ptrace", "process_vm_readv", "process_vm_writev")
TABLES = {
    "x86_64": (
        0xC000003E,
        {"setsid": 112, "setpgid": 109, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311},
    ),
    "aarch64": (
        0xC00000B7,
        {"setsid": 157, "setpgid": 154, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271},
    ),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program(machine: str) -> bytes:
    """The filter for ``machine`` (``platform.machine()``): refuse ``REFUSED`` (and on x86-64 the x32 ABI), allow the
    rest; a call made under another architecture's numbers is refused whole."""
    arch, numbers = TABLES[machine]
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    body = [_insn(BPF_LD_W_ABS, NR_OFFSET)]
    if machine == "x86_64":
        body.append(_insn(BPF_JGE_K, X32_BIT, jt=len(REFUSED) + 1))  # to the deny below the allow
    for i, name in enumerate(REFUSED):
        body.append(_insn(BPF_JEQ_K, numbers[name], jt=len(REFUSED) - i))
    body += [_insn(BPF_RET_K, SECCOMP_RET_ALLOW), _insn(BPF_RET_K, deny)]
    head = [_insn(BPF_LD_W_ABS, ARCH_OFFSET), _insn(BPF_JEQ_K, arch, jt=0, jf=len(body))]
    return b"".join([*head, *body, _insn(BPF_RET_K, deny)])


def install() -> None:
    """Install the filter in this process (and so in everything it starts). Raises OSError where the kernel refuses
    it, and on a machine it has no table for: the runner must not serve without it."""
    machine = platform.machine()
    if machine not in TABLES:
        raise OSError(errno.ENOSYS, f"no seccomp table for {machine}")
    code = program(machine)
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    for args in ((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0)):
        if libc.prctl(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl{args[:2]}: {errno.errorcode.get(err, err)}")
