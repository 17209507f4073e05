"""After each batch the stream hands its allocators' free memory back to the OS
(``tidemark.batch.release_free_memory``): what a batch allocated and freed through Arrow's pool
(mimalloc) or glibc's heap no longer counts in the driver's RSS."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, pyarrow as pa, pyarrow.compute as pc, numpy as np
from tidemark.batch import release_free_memory

def rss_mb():
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024

base = pa.array(np.random.default_rng(1).random(2_000_000))
out = {"before": rss_mb()}
arrow = [pc.add(base, float(i)) for i in range(16)]  # 16 x 15 MiB from Arrow's pool
heap = [bytearray(100_000) for _ in range(1_000)]  # 100 MiB of glibc heap (below mmap's threshold)
out["allocated"] = rss_mb()
del arrow, heap
out["freed"] = rss_mb()
out["pool"] = pa.total_allocated_bytes()
release_free_memory()
out["released"] = rss_mb()
print(json.dumps(out))
"""


def test_memory_a_batch_freed_leaves_the_process():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    rss = json.loads(done.stdout.strip().splitlines()[-1])
    assert rss["allocated"] - rss["before"] > 300, rss  # the probe did allocate
    assert rss["pool"] == 0  # nothing is in use any more ...
    assert rss["freed"] - rss["before"] > 150, rss  # ... yet the allocators keep most of it
    assert rss["released"] - rss["before"] < 40, rss  # until released
