"""Pre-flight checks of the sweep's storage: writable here, and seen by every node of a cluster."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sweeps.errors import BadInput


def check_storage(path: str) -> None:
    """The storage path must be writable (checked before launch, with a probe file)."""
    if "://" in path and not path.startswith("file://"):
        try:
            import pyarrow.fs as pafs

            fs, root = pafs.FileSystem.from_uri(path)
            fs.create_dir(root, recursive=True)
            probe = f"{root.rstrip('/')}/.sweeps-probe"
            with fs.open_output_stream(probe) as f:
                f.write(b"ok")
            fs.delete_file(probe)
        except Exception as exc:
            raise BadInput(f"storage.path: cannot write to {path!r} ({exc})") from None
        return
    folder = Path(path.removeprefix("file://"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe_file = folder / f".sweeps-probe-{os.getpid()}"
        probe_file.write_text("ok")
        probe_file.unlink()
    except OSError as exc:
        raise BadInput(f"storage.path: cannot write to {folder} ({exc.strerror}); choose a writable folder "
                       f"with storage.path=...") from None


def check_shared_storage(path: str) -> None:
    """On a multi-node cluster, prove that every node sees the storage path (write here, read there)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) <= 1 or "://" in path:
        return
    marker = Path(path) / f".sweeps-shared-{os.getpid()}-{int(time.time())}"
    marker.write_text("shared")

    @ray.remote(num_cpus=0)
    def sees(path: str) -> bool:
        return os.path.isfile(path)

    try:
        refs = {n["NodeID"]: sees.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(str(marker)) for n in nodes}
        blind = [nid[:8] for nid, ref in refs.items() if not ray.get(ref, timeout=60)]
    finally:
        marker.unlink(missing_ok=True)
    if blind:
        raise BadInput(f"storage.path: {path} is node-local: node(s) {', '.join(blind)} cannot see "
                       f"it; use a shared filesystem path mounted on every node or an object store URI "
                       f"(s3://bucket/path, gs://...)")
