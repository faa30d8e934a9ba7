"""mleforge.utils.memory.release_memory, and benchmarks/memory.py's sampler, on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.benchmark_module import load_benchmark

pytest.importorskip("psutil")  # the train extra's (accelerate depends on it)

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")

# Freed 1 MiB blocks that glibc keeps in its heap (a freed 16 MiB block raised the mmap threshold
# above 1 MiB), the last one allocated kept alive so that the heap cannot shrink from its top.
RETAINED = textwrap.dedent("""
    import ctypes, psutil
    from mleforge.utils.memory import release_memory
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(16 << 20))
    blocks = [libc.malloc(1 << 20) for _ in range(400)]
    for block in blocks:
        ctypes.memset(block, 1, 1 << 20)
    for block in blocks[:-1]:
        libc.free(block)
    rss = lambda: psutil.Process().memory_info().rss >> 20
    held = rss()
    trimmed = release_memory()
    print(held, rss(), trimmed)
""")


@glibc
def test_release_memory_gives_the_heaps_free_pages_back():
    out = subprocess.run([sys.executable, "-c", RETAINED], capture_output=True, text=True, check=True).stdout
    held, after, trimmed = out.split()
    assert trimmed == "True"
    assert int(held) - int(after) >= 300  # of the ~399 MiB freed but held


# Two 16 MiB tensors memory-mapped from a safetensors file as transformers loads weights, one
# more in memory; the pages of the mapping dropped, read again, then one value written.
MAPPED = textwrap.dedent("""
    import sys, torch
    from safetensors.torch import load_file, save_file
    from mleforge.utils.memory import file_backed_tensors, file_mappings, release_file_pages
    path = sys.argv[1]
    save_file({"a": torch.arange(4 << 20, dtype=torch.float32), "b": torch.ones(4 << 20)}, path)
    weights = load_file(path)
    own = torch.full((4 << 20,), 2.0)
    def resident():
        return sum(m.rss for m in file_mappings() if m.path.startswith(path)) >> 20
    total = float(weights["a"].sum() + weights["b"].sum())
    print(resident(), end=" ")
    print(release_file_pages([*weights.values(), own]) >> 20, resident(), end=" ")
    print(float(weights["a"].sum() + weights["b"].sum()) == total, resident(), end=" ")
    backed = file_backed_tensors(weights.values()), file_backed_tensors([weights["a"], own])
    weights["a"][0] = 7.0  # a written page: the mapping is now partly this process's own
    print(release_file_pages(weights.values()), float(weights["a"][0]), float(own[0]), end=" ")
    print(*backed, file_backed_tensors(weights.values()))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and madvise are Linux's")
def test_release_file_pages_drops_unwritten_mapped_weights_and_loses_nothing(tmp_path):
    """The mapped weights' 32 MiB leave the resident set and come back bit for bit when read;
    a mapping with a written page is left whole (dropping it would undo the write), and a
    tensor in the process's own memory is never touched."""
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    out = subprocess.run([sys.executable, "-c", MAPPED, str(tmp_path / "w.safetensors")], capture_output=True,
                         text=True, check=True).stdout.split()
    resident, released, after, same, again, second, written, own, backed, with_own, backed_after = out
    assert int(resident) >= 32 and int(released) >= 32 and int(after) == 0
    assert same == "True" and int(again) >= 32  # read back from the page cache
    assert (second, written, own) == ("0", "7.0", "2.0")
    assert (backed, with_own, backed_after) == ("True", "False", "False")


def test_file_mappings_parse_smaps_headers_and_sizes(tmp_path, monkeypatch):
    from mleforge.utils import memory

    smaps = textwrap.dedent("""\
        7f680b200000-7f6880e9e000 rw-p 00000000 fe:00 3596301                    /m/a b.safetensors (deleted)
        Size:            1928824 kB
        Rss:                1884 kB
        Anonymous:             8 kB
        VmFlags: rd wr mr mw me ac sd
        7f6900000000-7f6900001000 rw-p 00000000 00:00 0
        Rss:                   4 kB
        Anonymous:             4 kB
        7f6a00000000-7f6a00002000 r--s 00000000 00:05 12                         /dev/shm/x
        Rss:                   8 kB
        7f6b00000000-7f6b00003000 r--p 00000000 fe:00 7                          /usr/lib/libc.so.6
        Rss:                  12 kB
        Anonymous:             0 kB
        7f6c00000000-7f6c00004000 rw-p 00000000 fe:00 9                          /m/swapped.safetensors
        Rss:                   0 kB
        Anonymous:             0 kB
        Swap:                 16 kB
    """)
    path = tmp_path / "smaps"
    path.write_text(smaps)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: real_open(path if f == "/proc/self/smaps" else f, *a, **k))
    got = memory.file_mappings()
    assert got == [
        memory.FileMapping(0x7f680b200000, 0x7f6880e9e000, "/m/a b.safetensors (deleted)", 1884 * 1024, 8 * 1024, 0),
        memory.FileMapping(0x7f6b00000000, 0x7f6b00003000, "/usr/lib/libc.so.6", 12 * 1024, 0, 0),
        memory.FileMapping(0x7f6c00000000, 0x7f6c00004000, "/m/swapped.safetensors", 0, 0, 16 * 1024),
    ]
    # Written pages in memory or swapped out: either way the mapping is not the file's alone.
    assert [m.written for m in got] == [True, False, True]


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.path.realpath("/tmp") != "/tmp",
                    reason="/proc/self/mounts is Linux's; the paths below are taken as they are")
def test_filesystem_type_takes_the_longest_mount_point_above_a_path(tmp_path, monkeypatch):
    from mleforge.utils import memory

    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n"
                      "/dev/vdb /tmp/my\\040disk xfs rw 0 0\n/dev/vdc /tmp/back\\134slash btrfs rw 0 0\n"
                      "proc /proc proc rw 0 0\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: real_open(mounts if f == "/proc/self/mounts" else f, *a, **k))
    assert memory.filesystem_type("/tmp/x/frozen-weights") == "tmpfs"
    assert memory.filesystem_type("/tmp/my disk/run") == "xfs"
    assert memory.filesystem_type("/tmp/back\\slash") == "btrfs"
    assert memory.filesystem_type("/tmpfoo/run") == "ext4"  # /tmp is not a prefix of /tmpfoo
    assert memory.filesystem_type("/") == "ext4"


def test_the_sampler_sees_the_process_tree_peak_and_the_marks(tmp_path):
    bench = load_benchmark("memory")
    script = tmp_path / "two.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys, time
        own = bytearray(150 << 20)  # zero pages are not resident until written
        own[::4096] = b"x" * len(own[::4096])
        child = "b = bytearray(250 << 20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(1.5)"
        subprocess.run([sys.executable, "-c", child], check=True)
        print('{"done": 1}')
    """))
    result = bench.sample_tree([sys.executable, str(script)])
    assert result["marks"] == {"done": 1}
    assert 150 <= result["peak_main_mib"] < 300
    assert result["peak_tree_mib"] >= 400  # the parent's 150 MiB and the child's 250 at once
    assert result["maxrss_mib"] >= 250  # the kernel's peak of the biggest process: the child's
    assert result["timeline"] and result["timeline"][0][0] >= 0


def test_a_failing_phase_says_why(tmp_path):
    bench = load_benchmark("memory")
    with pytest.raises(SystemExit, match="no such phase here"):
        bench.sample_tree([sys.executable, "-c", "import sys; sys.exit('no such phase here')"])


def test_phase_peaks_count_a_sample_for_every_part_running_then():
    bench = load_benchmark("memory")
    peaks = bench.PhasePeaks(interval=0.005)
    held = []

    def allocate(mib):
        block = bytearray(mib << 20)
        block[::4096] = b"x" * len(block[::4096])  # resident only once written
        held.append(block)

    def outer():
        inner(200)

    inner = peaks.wrap(allocate, "inner")
    outer = peaks.wrap(outer, "outer")
    before = peaks.wrap(lambda: None, "before")
    start, start_anonymous = peaks.rss()
    before()
    outer()
    got = peaks.stop()
    held.clear()
    assert got["inner"] >= (start >> 20) + 190  # sampled at the part's end at the latest
    assert got["outer"] >= got["inner"]  # a sample inside the inner part counts for the outer one too
    assert got["before"] < got["inner"] - 150  # it ended before the 200 MiB were allocated
    assert list(got) == sorted(got, key=lambda part: -got[part])
    assert not peaks.running["outer"] and not peaks.running["inner"]
    assert peaks.anonymous_peak >= start_anonymous + (190 << 20)  # a bytearray is the process's own memory


def test_phase_peaks_hook_a_method_by_its_path(tmp_path, monkeypatch):
    bench = load_benchmark("memory")
    module = tmp_path / "hooked_module.py"
    module.write_text("class Thing:\n    def run(self, x):\n        return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    peaks = bench.PhasePeaks(interval=0.005)
    peaks.hook("hooked_module", "Thing.run", "thing")
    import hooked_module

    assert hooked_module.Thing().run(1) == 2
    assert "thing" in peaks.stop()


def test_every_part_of_the_main_job_names_a_function_that_exists():
    import importlib

    pytest.importorskip("trl")
    pytest.importorskip("ctranslate2")
    bench = load_benchmark("memory")
    for module, path, _ in bench.PHASE_HOOKS:  # a renamed one would leave its part silently empty
        owner = importlib.import_module(module)
        for attr in path.split("."):
            owner = getattr(owner, attr)
        assert callable(owner), (module, path)


def test_a_failing_main_job_keeps_its_peaks_and_its_exit_code():
    pytest.importorskip("trl")
    pytest.importorskip("ctranslate2")
    bench = load_benchmark("memory")
    command = [sys.executable, bench.__file__, "--phase", "main_job", "--train-args", "--no-such-flag"]
    result = bench.sample_tree(command, check=False)
    assert result["exit_code"] == 2  # argparse's, passed on
    assert result["marks"]["exit_code"] == 2
    assert result["marks"]["peak outside every part MiB"] > 0
    assert "--no-such-flag" in result["stderr_tail"]


def test_main_job_pairs_compare_each_figure_paired():
    """Two pairs by hand: each side's mean, the mean of this code − baseline, its SE
    (differences −100 and −300: mean −200, SD 141.42, SE 100)."""
    bench = load_benchmark("memory")

    def job(peak, anonymous, seconds, maxrss):
        return {"maxrss_mib": maxrss, "marks": {"train_s": seconds, "peak GRPO step MiB": peak,
                                               "peak anonymous (less files' pages) MiB": anonymous, "exit_code": 0}}

    pairs = [(job(7000, 6000, 700.0, 7001), job(6900, 5800, 710.0, 6902)),
             (job(7200, 6100, 720.0, 7201), job(6900, 5700, 716.0, 6903))]
    got = bench.compare_pairs(pairs, "/old/src")
    assert got["title"] == "The main job against /old/src, 2 pair(s)"
    assert got["columns"] == ["figure", "baseline", "this code", "mean difference", "SE"]
    rows = {row[0]: row[1:] for row in got["rows"]}
    assert rows["peak GRPO step MiB"] == [7100.0, 6900.0, -200.0, 100.0]
    assert rows["peak anonymous (less files' pages) MiB"] == [6050.0, 5750.0, -300.0, 100.0]
    assert rows["max RSS MiB"] == [7101.0, 6902.5, -198.5, 99.5]
    assert rows["seconds of the run"] == [710.0, 713.0, 3.0, 7.0]
    assert set(rows) == {"peak GRPO step MiB", "peak anonymous (less files' pages) MiB", "max RSS MiB",
                         "seconds of the run"}  # the exit code is not a figure
    assert bench.compare_pairs(pairs[:1], "/old/src")["rows"][0][-1] is None  # one pair: no SE


def test_baseline_src_must_hold_mleforge_and_come_with_the_main_job(tmp_path, capsys):
    bench = load_benchmark("memory")
    with pytest.raises(SystemExit):
        bench.main(["--phases", "imports", "--baseline-src", str(tmp_path)])
    assert "--baseline-src compares main jobs: add --main-job" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--phases", "imports", "--main-job", "--baseline-src", str(tmp_path)])
    assert "no mleforge package in it; give a checkout's src/ folder" in capsys.readouterr().err
