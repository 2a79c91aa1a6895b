#!/usr/bin/env python3
# deny-clock-read.py COMMAND [ARG]...: run COMMAND with adjtimex(2) and
# clock_adjtime(2) refused with EPERM, even to read the clock's state, the
# way systemd's ProtectClock=yes refuses them (a seccomp filter; fleetd's
# unit has it). For tests/integration/doctor.sh: fleetd's clock check must
# say why it cannot tell, not print a bare "Operation not permitted".
# x86_64 only (the syscall numbers); exits 77 elsewhere, before running anything.
import ctypes
import os
import platform
import struct
import sys

if platform.machine() != "x86_64" or len(sys.argv) < 2:
    sys.exit(77)

AUDIT_ARCH_X86_64 = 0xC000003E
NR_ADJTIMEX, NR_CLOCK_ADJTIME = 159, 305
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, EPERM = 0x7FFF0000, 0x00050000, 1


def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


prog = b"".join([
    insn(LD_W_ABS, 0, 0, 4),                      # 0: the arch
    insn(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),         # 1: another arch: allow (5)
    insn(LD_W_ABS, 0, 0, 0),                      # 2: the syscall number
    insn(JEQ_K, 2, 0, NR_ADJTIMEX),               # 3: adjtimex: EPERM (6)
    insn(JEQ_K, 1, 0, NR_CLOCK_ADJTIME),          # 4: clock_adjtime: EPERM (6)
    insn(RET_K, 0, 0, SECCOMP_RET_ALLOW),         # 5
    insn(RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM), # 6
])
buf = ctypes.create_string_buffer(prog)
fprog = struct.pack("HxxxxxxP", len(prog) // 8, ctypes.addressof(buf))
fprog_buf = ctypes.create_string_buffer(fprog)
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog_buf), 0, 0) != 0:
    sys.exit("deny-clock-read: cannot install the filter: " + os.strerror(ctypes.get_errno()))
os.execvp(sys.argv[1], sys.argv[1:])
