"""The seccomp filter's program, instruction by instruction and byte by byte (hand-computed)."""

from __future__ import annotations

import struct

from mleforge.sandbox import seccomp

# x86_64: AUDIT_ARCH_X86_64 = 0xc000003e; ptrace 101, process_vm_readv 310, process_vm_writev 311.
# Jumps are relative to the next instruction: from 1, jf=7 lands on 9; from 3, jt=5 on 9; from 4,
# 5 and 6, jt=3, 2, 1 on 8.
X86_64 = [
    (0x20, 0, 0, 4),           # 0 ld [arch]
    (0x15, 0, 7, 0xC000003E),  # 1 jeq x86_64 ? 2 : 9
    (0x20, 0, 0, 0),           # 2 ld [nr]
    (0x35, 5, 0, 0x40000000),  # 3 jge x32 bit ? 9 : 4
    (0x15, 3, 0, 101),         # 4 jeq ptrace ? 8 : 5
    (0x15, 2, 0, 310),         # 5 jeq process_vm_readv ? 8 : 6
    (0x15, 1, 0, 311),         # 6 jeq process_vm_writev ? 8 : 7
    (0x06, 0, 0, 0x7FFF0000),  # 7 ret ALLOW
    (0x06, 0, 0, 0x00050001),  # 8 ret ERRNO | EPERM (1)
    (0x06, 0, 0, 0x80000000),  # 9 ret KILL_PROCESS
]


def test_the_x86_64_program_instruction_by_instruction():
    assert seccomp.instructions("x86_64") == X86_64


def test_the_x86_64_program_byte_by_byte():
    data = seccomp.program_for("x86_64")
    assert len(data) == 80  # 10 entries of 8 bytes (u16 code, u8 jt, u8 jf, u32 k)
    little = struct.pack("<H", 1) == struct.pack("=H", 1)
    if little:
        assert data[:16].hex() == "2000000004000000" "150000073e0000c0"  # code is a u16: 15 00, then jt, jf
        assert data[24:32].hex() == "3500050000000040"
        assert data[32:40].hex() == "1500030065000000"  # 101 = 0x65
        assert data[64:80].hex() == "0600000001000500" "0600000000000080"
    assert [struct.unpack_from("=HBBI", data, i) for i in range(0, 80, 8)] == X86_64


def test_aarch64_differs_only_in_its_numbers():
    expected = [list(ins) for ins in X86_64]
    expected[1][3] = 0xC00000B7  # AUDIT_ARCH_AARCH64
    expected[4][3], expected[5][3], expected[6][3] = 117, 270, 271
    assert seccomp.instructions("aarch64") == [tuple(ins) for ins in expected]


def test_an_unknown_architecture_gets_no_filter_and_says_so():
    assert seccomp.program_for("riscv64") is None
    assert seccomp.status("riscv64") == "off (no filter for architecture 'riscv64')"
    assert seccomp.status("x86_64") == "ptrace denied"


def test_the_descriptor_reads_back_the_program_to_eof():
    import os

    program = seccomp.program_for("x86_64")
    fd = seccomp.filter_fd(program)
    try:
        assert os.read(fd, 1000) == program
        assert os.read(fd, 1000) == b""  # EOF: bwrap reads to it
    finally:
        os.close(fd)



# -- the run's filter (stacked by the supervisor in the script's process) -------------


def _evaluate(program, arch_value: int, nr: int, args=(0,) * 6) -> int:
    """Run a classic BPF seccomp program over one struct seccomp_data (little-endian)."""
    args = (*args, *(0,) * (6 - len(args)))
    data = struct.pack("<iI", nr, arch_value) + struct.pack("<Q", 0) + struct.pack("<6Q", *args)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unknown instruction {code:#x}")


def test_the_run_filter_denies_keyrings_namespaces_and_memfd_and_allows_the_rest():
    program = seccomp.run_instructions("x86_64")
    x86 = 0xC000003E
    eperm, enosys, allow, kill = 0x00050001, 0x00050026, 0x7FFF0000, 0x80000000
    # add_key request_key keyctl memfd_create memfd_secret shmget msgget semget clone3
    for nr in (248, 249, 250, 319, 447, 29, 68, 64, 435):
        assert _evaluate(program, x86, nr) == enosys, nr
    assert _evaluate(program, x86, 308) == eperm  # setns
    assert _evaluate(program, x86, 272, (0x10000000,)) == eperm  # unshare(CLONE_NEWUSER)
    assert _evaluate(program, x86, 272, (0x40000000,)) == eperm  # unshare(CLONE_NEWNET)
    assert _evaluate(program, x86, 272, (0x80,)) == eperm  # unshare(CLONE_NEWTIME)
    assert _evaluate(program, x86, 272, (0x400,)) == allow  # unshare(CLONE_FILES)
    assert _evaluate(program, x86, 56, (0x10000000 | 17,)) == eperm  # clone(CLONE_NEWUSER | SIGCHLD)
    fork_flags = 0x01200000 | 17  # glibc's fork: CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD
    thread_flags = 0x003D0F00  # pthread_create's clone flags
    assert _evaluate(program, x86, 56, (fork_flags,)) == allow
    assert _evaluate(program, x86, 56, (thread_flags,)) == allow
    for nr in (0, 1, 2, 9, 57, 59, 257):  # read write open mmap fork execve openat
        assert _evaluate(program, x86, nr) == allow, nr
    assert _evaluate(program, x86, 0x40000000 | 1) == kill  # the x32 ABI
    assert _evaluate(program, 0x40000003, 1) == kill  # i386


def test_the_run_filter_exists_where_the_sandbox_filter_does():
    assert seccomp.run_program_for("riscv64") is None
    for arch in seccomp.ARCHES:
        assert len(seccomp.run_program_for(arch)) == 8 * len(seccomp.run_instructions(arch))
        assert set(seccomp.RUN_NUMBERS[arch]) == set(seccomp.RUN_DENIED) | set(seccomp.RUN_FLAG_CHECKED)
