"""The seccomp filters of a bwrap sandbox: no ptrace (every process), and the run's own on top.

The first, every bwrap sandbox's: no ptrace, no process_vm_readv/writev.

Why: as an unprivileged user, bwrap's own pid 1 (its reaper inside the pid
namespace) has the script's uid and is dumpable, so a script could attach to it
with ptrace and choose the exit status bwrap reports. The filter makes those
calls fail with EPERM in the command bwrap starts (our supervisor) and in all it
starts in turn (filters are inherited and cannot be removed); every other call
is allowed. `unshare`, which the warm pool's runs need, is untouched.

The program is classic BPF over `struct seccomp_data` (nr at offset 0, arch at
offset 4), given to bwrap as raw `struct sock_filter` entries on a descriptor
(`bwrap --seccomp FD`, which reads it to EOF):

    0  ld  [arch]
    1  jeq AUDIT_ARCH            ? 2 : 9     another ABI (i386 int 0x80 on x86_64): killed
    2  ld  [nr]
    3  jge 0x40000000            ? 9 : 4     the x32 ABI (nr with bit 30): killed
    4  jeq ptrace                ? 8 : 5
    5  jeq process_vm_readv      ? 8 : 6
    6  jeq process_vm_writev     ? 8 : 7
    7  ret ALLOW
    8  ret ERRNO | EPERM
    9  ret KILL_PROCESS

A machine whose architecture is not known here gets no filter (`program_for`
returns None, and the isolation record says so): a filter for the wrong
architecture would kill every process at its first call.

A second filter, the run's (`run_program_for`), is stacked on it by the supervisor
in the script's own process, after the namespaces of the run are made (the warm
pool's zygote and shims need unshare; the script must not): it keeps kernel state
that outlives a run, or that no limit counts, out of the script's reach:

- the keyring calls (add_key, request_key, keyctl): ENOSYS, as on a kernel without
  keys. Every process shares its session and user keyrings with the executor and
  with later runs (a secret read, a key left for the next rollout);
- new namespaces: unshare and clone with any CLONE_NEW* flag, and setns: EPERM.
  clone3 (whose flags sit in memory a filter cannot read): ENOSYS, so that glibc
  falls back to clone, whose flags it can. As root a run could otherwise make a
  user namespace and hold every capability in it (a user's runs cannot already:
  bwrap's --disable-userns, the pool's max_user_namespaces = 0);
- memory outside every resident set: memfd_create and memfd_secret (ENOSYS), and
  System V shared memory, message queues and semaphores (shmget, msgget, semget:
  ENOSYS; POSIX semaphores, which multiprocessing uses, live in /dev/shm). The run's
  /dev/shm is counted by the executor with the run's memory. Pipe and socket buffers
  are bounded only by the kernel's per-user limits: a cgroup's memory.max, where the
  machine delegates one, is what would count them.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# linux/filter.h, linux/seccomp.h, linux/audit.h
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
X32_SYSCALL_BIT = 0x40000000
OFFSET_NR, OFFSET_ARCH = 0, 4  # in struct seccomp_data

# machine -> (AUDIT_ARCH_*, {name: syscall number})
ARCHES = {
    "x86_64": (0xC000003E, {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271}),
}
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev")
SUMMARY = "ptrace denied"  # what the isolation record says when the filter is on
# The run's filter (see the module docstring): name -> the errno the call fails with.
RUN_DENIED = {
    "add_key": errno.ENOSYS, "request_key": errno.ENOSYS, "keyctl": errno.ENOSYS,
    "memfd_create": errno.ENOSYS, "memfd_secret": errno.ENOSYS, "shmget": errno.ENOSYS,
    # System V message queues and semaphores hold kernel memory no limit of the run counts.
    "msgget": errno.ENOSYS, "semget": errno.ENOSYS,
    "clone3": errno.ENOSYS, "setns": errno.EPERM,
}
# name -> (index of the flags argument, flags refused with EPERM)
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME = 0x10000000, 0x20000000, 0x40000000, 0x00000080
NEW_NAMESPACES = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
RUN_FLAG_CHECKED = {
    "unshare": (0, NEW_NAMESPACES | CLONE_NEWTIME),
    "clone": (0, NEW_NAMESPACES),  # not CLONE_NEWTIME: in clone's flags that bit is the exit signal's
}
RUN_NUMBERS = {
    "x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250, "memfd_create": 319, "memfd_secret": 447,
               "shmget": 29, "msgget": 68, "semget": 64, "clone3": 435, "setns": 308, "unshare": 272, "clone": 56},
    "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219, "memfd_create": 279, "memfd_secret": 447,
                "shmget": 194, "msgget": 186, "semget": 190, "clone3": 435, "setns": 268, "unshare": 97, "clone": 220},
}
BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
OFFSET_ARGS = 16  # in struct seccomp_data: u64 args[6]; the low word first (little-endian machines)

Instruction = tuple[int, int, int, int]  # (code, jt, jf, k)


def instructions(arch: str) -> list[Instruction]:
    """The program for `arch` (a key of ARCHES), as (code, jt, jf, k) tuples; jumps
    are relative to the next instruction, as in BPF."""
    audit_arch, numbers = ARCHES[arch]
    denied = [numbers[name] for name in DENIED]
    n = len(denied)
    # The returns follow the n checks: ALLOW at 4 + n, ERRNO at 5 + n, KILL at 6 + n.
    deny, kill = 5 + n, 6 + n
    program: list[Instruction] = [
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        (BPF_JEQ_K, 0, kill - 2, audit_arch),
        (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
        (BPF_JGE_K, kill - 4, 0, X32_SYSCALL_BIT),
    ]
    for number in denied:
        pc = len(program)
        program.append((BPF_JEQ_K, deny - pc - 1, 0, number))
    program += [
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
    ]
    return program


def run_instructions(arch: str) -> list[Instruction]:
    """The run's filter for `arch` (see the module docstring):

        ld [arch]; jeq AUDIT_ARCH ? next : KILL
        ld [nr];   jge X32 ? KILL : next
        jeq <denied nr> ? ERRNO(its errno) : next          one per RUN_DENIED
        jeq <flagged nr> ? next : past the three below     one block per RUN_FLAG_CHECKED
          ld [args[i] low word]; jset flags ? EPERM : next; ld [nr]
        ret ALLOW; ret ERRNO|EPERM; ret ERRNO|ENOSYS; ret KILL_PROCESS
    """
    audit_arch, numbers = ARCHES[arch][0], RUN_NUMBERS[arch]
    # The returns, by label; a jump names a label, or skips a count of instructions (an int).
    returns = {"allow": SECCOMP_RET_ALLOW, "EPERM": SECCOMP_RET_ERRNO | errno.EPERM,
               "ENOSYS": SECCOMP_RET_ERRNO | errno.ENOSYS, "kill": SECCOMP_RET_KILL_PROCESS}
    body: list[tuple[int, str | int, str | int, int]] = [
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        (BPF_JEQ_K, 0, "kill", audit_arch),
        (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
        (BPF_JGE_K, "kill", 0, X32_SYSCALL_BIT),
    ]
    body += [(BPF_JEQ_K, errno.errorcode[RUN_DENIED[name]], 0, numbers[name]) for name in RUN_DENIED]
    for name, (index, flags) in RUN_FLAG_CHECKED.items():
        body += [
            (BPF_JEQ_K, 0, 3, numbers[name]),  # not this call: past the three below
            (BPF_LD_W_ABS, 0, 0, OFFSET_ARGS + 8 * index),
            (BPF_JSET_K, "EPERM", 0, flags),
            (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
        ]
    at = {label: len(body) + i for i, label in enumerate(returns)}

    def jump(pc: int, where: str | int) -> int:
        return where if isinstance(where, int) else at[where] - pc - 1

    program = [(code, jump(pc, jt), jump(pc, jf), k) for pc, (code, jt, jf, k) in enumerate(body)]
    return program + [(BPF_RET_K, 0, 0, value) for value in returns.values()]


def run_program_for(arch: str | None = None) -> bytes | None:
    """The run's filter's bytes for this machine (or `arch`), None where unknown (as program_for)."""
    arch = arch or machine_arch()
    return encode(run_instructions(arch)) if arch in RUN_NUMBERS else None


def encode(program: list[Instruction]) -> bytes:
    """Native-endian `struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }` entries."""
    return b"".join(struct.pack("=HBBI", *ins) for ins in program)


def machine_arch() -> str:
    return platform.machine()


def program_for(arch: str | None = None) -> bytes | None:
    """The filter's bytes for this machine (or `arch`), None where the architecture
    is not one we know the syscall numbers of."""
    arch = arch or machine_arch()
    return encode(instructions(arch)) if arch in ARCHES else None


def status(arch: str | None = None) -> str:
    """What the isolation record says about the filter on this machine."""
    arch = arch or machine_arch()
    return SUMMARY if arch in ARCHES else f"off (no filter for architecture {arch!r})"


def filter_fd(program: bytes) -> int:
    """A descriptor to read `program` from to EOF (bwrap --seccomp FD): the read end of
    a pipe holding it, inheritable. The caller passes it on and closes it."""
    read, write = os.pipe()
    try:
        # Far below the pipe's buffer (64 KiB): the write cannot block.
        os.write(write, program)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


def landlock_status() -> str:
    """What the isolation record says about the Landlock domain the supervisor puts the
    script in (supervisor._landlock_scope): this kernel's Landlock ABI, or why none."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): the ABI version.
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 0:
        return f"off (no Landlock here: {os.strerror(ctypes.get_errno())})"
    return f"/proc of processes outside the script denied (ABI {abi})"
