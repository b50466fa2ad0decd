"""A tabular classifier fed by Ray Data: the rows come from files, and each Train worker reads only its shard.

Data is declared in config (``trainable.params.data``)::

    data:
      path: null            # Parquet/CSV file or folder, local or any URI pyarrow reads (s3://, gs://...);
                            # null = $SWEEPS_HOME/data/wine.parquet
      format: parquet       # parquet | csv
      label: target         # integer class column
      id_column: row_id     # unique integer row id: drives the deterministic train/val split
      val_fraction: 0.2
      num_classes: 3
      example: wine         # a missing *local* file is generated from this bundled scikit-learn dataset
      reader: classic       # classic | ray_default: Ray Data's Parquet reader (see build_datasets)

The trial's driver calls :func:`build_datasets` (``trainable.datasets``); Ray Train splits the train dataset
across the workers (``streaming_split(equal=True)``: equal shards, so up to ``world - 1`` rows may sit out an
epoch), and :func:`train_loop` iterates its shard with ``iter_torch_batches(prefetch_batches=...)``. The small
validation split is read with pyarrow by :func:`validation_data` (each rank scores a slice; promotion scores
all of it). The model standardizes its inputs itself (a batch norm without affine terms), so a promoted model
takes raw feature rows.

Ray Data's read tasks need CPUs that no trial holds: give the local cluster spare logical CPUs
(``cluster.num_cpus``, see ``conf/experiment/wine_data.yaml``), or the first epoch waits for them forever.

Reports ``train/loss``, ``val/loss``, ``val/acc``, ``epoch``, ``opt/lr``, ``time/data_s``, ``time/compute_s``,
``time/data_frac`` and shard evidence gathered from every rank: ``data/rows_seen`` (rank 0's rows this
epoch), ``data/rank0_id_sum``, ``data/rows_total`` (all ranks), ``data/rows_unique`` and
``data/shards_disjoint`` (1.0 when no row reached two workers), ``data/val_rows_in_train`` (must be 0);
``track_rows: false`` skips that evidence (it gathers every row id each epoch: keep it for small data).
"""

from __future__ import annotations

import functools
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainables import common, preemption

METRICS = ("train/loss", "val/loss", "val/acc", "epoch", "opt/lr")
FORMATS = ("parquet", "csv")
EXAMPLES = ("wine", "breast_cancer")
READERS = ("classic", "ray_default")
DATA_DEFAULTS: dict[str, Any] = {
    "path": None,
    "format": "parquet",
    "label": "target",
    "id_column": "row_id",
    "val_fraction": 0.2,
    "num_classes": 3,
    "example": "wine",
    "reader": "classic",
}
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: a multiplicative hash that spreads consecutive ids


@dataclass(frozen=True)
class DataSettings:
    """The validated ``data`` block of the trainable's params."""

    path: str
    format: str
    label: str
    id_column: str
    val_fraction: float
    num_classes: int
    example: str | None
    reader: str = "classic"

    @property
    def is_local(self) -> bool:
        return "://" not in self.path or self.path.startswith("file://")


def default_data_path(example: str = "wine", fmt: str = "parquet") -> str:
    """``$SWEEPS_HOME/data/<example>.<fmt>`` (``$SWEEPS_HOME`` defaults to ``./.sweeps``), absolute."""
    home = Path(os.environ.get("SWEEPS_HOME", ".sweeps")).expanduser()
    if not home.is_absolute():  # a Tune trial runs in its trial folder: resolve against where Tune started
        home = Path(os.environ.get("TUNE_ORIG_WORKING_DIR", os.getcwd())) / home
    return str((home / "data" / f"{example}.{fmt}").resolve())


def data_settings(config: dict[str, Any]) -> DataSettings:
    """Read and check ``config["data"]`` (missing keys take :data:`DATA_DEFAULTS`); ValueError names the key."""
    raw = {**DATA_DEFAULTS, **(config.get("data") or {})}
    unknown = sorted(set(raw) - set(DATA_DEFAULTS))
    if unknown:
        raise ValueError(f"data: unknown key(s) {', '.join(unknown)}; known: {', '.join(DATA_DEFAULTS)}")
    fmt = str(raw["format"]).lower()
    if fmt not in FORMATS:
        raise ValueError(f"data.format: {raw['format']!r} is not supported; use one of {', '.join(FORMATS)}")
    frac = float(raw["val_fraction"])
    if not 0.0 < frac < 1.0:
        raise ValueError(f"data.val_fraction: must be within (0, 1), got {raw['val_fraction']!r}")
    classes = int(raw["num_classes"])
    if classes < 2:
        raise ValueError(f"data.num_classes: must be >= 2, got {raw['num_classes']!r}")
    example = raw["example"] or None
    if example is not None and example not in EXAMPLES:
        raise ValueError(f"data.example: {example!r} is not bundled; use one of {', '.join(EXAMPLES)} or null")
    reader = str(raw["reader"])
    if reader not in READERS:
        raise ValueError(f"data.reader: {reader!r} is not a reader; use one of {', '.join(READERS)}")
    path = str(raw["path"]) if raw["path"] else default_data_path(example or "wine", fmt)
    return DataSettings(path=path, format=fmt, label=str(raw["label"]), id_column=str(raw["id_column"]),
                        val_fraction=frac, num_classes=classes, example=example, reader=reader)


# -- the example dataset ------------------------------------------------------------------------------------
def example_frame(name: str = "wine") -> Any:
    """A bundled scikit-learn dataset as a DataFrame: snake_case feature columns, ``target``, ``row_id``."""
    from sklearn.datasets import load_breast_cancer, load_wine

    loaders = {"wine": load_wine, "breast_cancer": load_breast_cancer}
    if name not in loaders:
        raise ValueError(f"example: {name!r} is not bundled; use one of {', '.join(loaders)}")
    bunch = loaders[name](as_frame=True)
    df = bunch.data.copy()
    df.columns = [re.sub(r"[^a-z0-9]+", "_", c.lower()).strip("_") for c in df.columns]
    df["target"] = bunch.target.astype("int64")
    df["row_id"] = range(len(df))
    return df.astype({"row_id": "int64"})


def write_example_dataset(path: str | Path, name: str = "wine", fmt: str = "parquet") -> Path:
    """Write :func:`example_frame` to ``path`` atomically (temp file + rename): readers never see half a file.

    Two trials may race to create it; both write the same bytes and the last rename wins.
    """
    import pyarrow as pa

    if fmt not in FORMATS:
        raise ValueError(f"format: {fmt!r} is not supported; use one of {', '.join(FORMATS)}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(example_frame(name), preserve_index=False)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        else:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def ensure_data(settings: DataSettings) -> str:
    """The data path; a missing local file is generated from ``settings.example`` first (else FileNotFoundError)."""
    local = settings.path.removeprefix("file://")
    if not settings.is_local or os.path.exists(local):
        return settings.path
    if settings.example is None:
        raise FileNotFoundError(f"data.path: {local} does not exist (and data.example is null, so nothing is "
                                f"generated); point data.path at a {settings.format} file or folder")
    write_example_dataset(local, settings.example, settings.format)
    return settings.path


# -- the split and the columns ------------------------------------------------------------------------------
def is_val(row_ids: Any, val_fraction: float) -> Any:
    """Boolean mask: which row ids belong to the validation split.

    A hash of the id, not the row's position: the split is the same on every read, for every block layout,
    and needs no shuffle or global count (so it streams).
    """
    import numpy as np

    ids = np.asarray(row_ids).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = ids * np.uint64(_GOLDEN)  # wraps mod 2**64 on purpose
    u = (h >> np.uint64(11)).astype(np.float64) / float(2**53)  # uniform in [0, 1)
    return u < val_fraction


def _pyarrow_dataset(settings: DataSettings) -> Any:
    import pyarrow.dataset as pds

    return pds.dataset(settings.path.removeprefix("file://") if settings.is_local else settings.path,
                       format=settings.format)


def feature_columns(settings: DataSettings) -> list[str]:
    """Every column except the label and the id, in file order (read from the schema only)."""
    schema = _pyarrow_dataset(settings).schema
    missing = [c for c in (settings.label, settings.id_column) if c not in schema.names]
    if missing:
        raise ValueError(f"data: column(s) {', '.join(missing)} not in {settings.path}; columns: "
                         f"{', '.join(schema.names)}")
    return [c for c in schema.names if c not in (settings.label, settings.id_column)]


def _to_xy(batch: dict[str, Any], features: list[str], label: str, id_column: str, val_fraction: float,
           want_val: bool) -> dict[str, Any]:
    """Ray Data batch (numpy columns) -> {x: (B, F) float32, y: (B,) int64, row_id: (B,)} of one split."""
    import numpy as np

    keep = is_val(batch[id_column], val_fraction) == want_val
    x = np.stack([np.asarray(batch[c], dtype=np.float32) for c in features], axis=1)  # (B, F)
    return {"x": x[keep], "y": np.asarray(batch[label], dtype=np.int64)[keep],
            "row_id": np.asarray(batch[id_column], dtype=np.int64)[keep]}


def build_datasets(config: dict[str, Any]) -> dict[str, Any]:
    """Called in the trial's driver: ``{"train": Dataset}``, the train split read lazily from the file.

    The validation split is small and read by :func:`validation_data` (on each worker, and by promotion).
    """
    import ray.data

    quiet = ray.data.DataContext.get_current()  # the datasets below copy this context
    quiet.enable_progress_bars = False
    quiet.print_on_execution_start = False
    settings = data_settings(config)
    # Ray Data's newer Parquet reader (DataContext.use_datasource_v2, on by default in recent Ray) starts a pool
    # of footer-reading actors (32 by default) for every execution, so every epoch of every trial: dozens of
    # new processes per epoch for one small file, minutes on a small machine while trials share it
    # (benchmarks/ray_data_reader.py). ``reader: classic`` (the default here) runs plain read tasks;
    # ``ray_default`` leaves Ray's choice (many large files on a cluster).
    if settings.reader == "classic" and getattr(quiet, "use_datasource_v2", False):
        quiet.use_datasource_v2 = False
    path = ensure_data(settings)
    features = feature_columns(settings)
    read = ray.data.read_parquet if settings.format == "parquet" else ray.data.read_csv
    to_xy = functools.partial(_to_xy, features=features, label=settings.label, id_column=settings.id_column,
                              val_fraction=settings.val_fraction, want_val=False)
    ds = read(path).map_batches(to_xy, batch_format="numpy")
    return {"train": ds}


# -- model --------------------------------------------------------------------------------------------------
def _mlp_class() -> Any:
    from torch import nn

    class TabularMLP(nn.Module):
        """Standardize -> MLP. The input norm's running mean/var are buffers: they travel with the checkpoint,
        so a promoted model takes raw feature rows."""

        def __init__(self, num_features: int, num_classes: int, hidden: int, depth: int, dropout: float):
            super().__init__()
            # momentum=None: the running stats are the plain average over every training batch seen
            self.norm = nn.BatchNorm1d(num_features, affine=False, momentum=None)
            layers: list[nn.Module] = []
            width = num_features
            for _ in range(depth):
                layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
                width = hidden
            layers.append(nn.Linear(width, num_classes))
            self.net = nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            return self.net(self.norm(x.float()))  # (B, F) -> (B, C) logits

    return TabularMLP


def build_model(config: dict[str, Any]) -> Any:
    """The MLP for the configured file: its feature count comes from the file's schema."""
    settings = data_settings(config)
    ensure_data(settings)
    return _mlp_class()(
        num_features=len(feature_columns(settings)),
        num_classes=settings.num_classes,
        hidden=int(config.get("hidden_size", 64)),
        depth=int(config.get("num_layers", 1)),
        dropout=float(config.get("dropout", 0.0)),
    )


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    """Promotion's hook: the checkpoint's MLP (its input norm standardizes raw rows) and the file's columns."""
    settings = data_settings(config)
    ensure_data(settings)
    model = common.load_weights(checkpoint_dir, build_model(config))
    return common.ServableModel(module=model, task="classification", columns=tuple(feature_columns(settings)),
                                labels=tuple(range(settings.num_classes)))


def validation_data(config: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """The validation split (raw features (N, F) float32, labels (N,) int64), read from the same file."""
    import numpy as np
    import torch

    settings = data_settings(config or {})
    ensure_data(settings)
    features = feature_columns(settings)
    table = _pyarrow_dataset(settings).to_table(columns=[*features, settings.label, settings.id_column])
    cols = {c: table.column(c).to_numpy() for c in table.column_names}
    batch = _to_xy(cols, features, settings.label, settings.id_column, settings.val_fraction, want_val=True)
    order = np.argsort(batch["row_id"], kind="stable")  # file order must not matter
    return torch.from_numpy(batch["x"][order]), torch.from_numpy(batch["y"][order])


# -- the loop -----------------------------------------------------------------------------------------------
def _all_reduce(t: Any) -> Any:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t)
    return t


def _all_gather(obj: Any) -> list[Any]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def shard_evidence(ids_per_rank: list[list[int]], val_fraction: float) -> dict[str, float]:
    """What the workers' row ids prove: shard sizes, disjointness, no validation row in training."""
    import numpy as np

    flat = [i for ids in ids_per_rank for i in ids]
    unique = set(flat)
    leaked = int(is_val(np.asarray(sorted(unique), dtype=np.int64), val_fraction).sum()) if unique else 0
    return {
        "data/rows_seen": float(len(ids_per_rank[0])),
        "data/rank0_id_sum": float(sum(ids_per_rank[0])),
        "data/rows_total": float(len(flat)),
        "data/rows_unique": float(len(unique)),
        "data/shards_disjoint": 1.0 if len(unique) == len(flat) else 0.0,
        "data/val_rows_in_train": float(leaked),
    }


def train_loop(config: dict[str, Any]) -> None:
    """Runs on every Train worker: iterate this worker's shard of ``train``; evaluate on a slice of the val split."""
    import ray.train
    import ray.train.torch
    import torch

    common.check_knobs(config)
    common.set_threads(config)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(int(config.get("seed", 0)))  # same init on every rank (DDP broadcasts rank 0's anyway)

    settings = data_settings(config)
    train_shard = ray.train.get_dataset_shard("train")  # this worker's share of the streaming split
    batch_size = int(config.get("batch_size", 32))
    prefetch = int(config.get("prefetch_batches", 1))
    shuffle_buffer = int(config.get("shuffle_buffer", 0)) or None
    # The validation split is small: each rank reads it once (the same reader promotion uses) and scores
    # every world-th row; an all-reduce sums the parts. One Ray Data execution per epoch, not two.
    x_va, y_va = validation_data(config)
    x_va, y_va = x_va[rank::world], y_va[rank::world]  # (N_val / world, F), (N_val / world,)

    model = build_model(config)
    lr = common.effective_lr(config, world)
    weight_decay = float(config.get("weight_decay", 0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    accum = common.accumulation_steps(config)
    loss_fn = torch.nn.CrossEntropyLoss()

    start_epoch, restored = 1, {}
    ckpt = common.resume_checkpoint(config)
    spot = preemption.Watch.start(None, config.get(common.TRIAL_ID_KEY))
    if ckpt is not None:
        with ckpt.as_directory() as d:
            model_state, optim_state, meta = common.load_checkpoint(d)
            spot = preemption.Watch.start(d, config.get(common.TRIAL_ID_KEY))
        model.load_state_dict(model_state)  # includes the input norm's running statistics
        optimizer.load_state_dict(optim_state)
        start_epoch = int(meta["epoch"]) + 1
        restored = {"restored_from": str(meta.get("trial_id", "")), "restored_epoch": int(meta["epoch"])}
    common.apply_hparams(optimizer, lr, weight_decay)  # the trial's (possibly PBT-mutated) values win
    model = ray.train.torch.prepare_model(model)
    device = ray.train.torch.get_device()
    x_va, y_va = x_va.to(device), y_va.to(device)

    epochs = int(config.get("epochs", 10))
    every = int(config.get("checkpoint_every", 1))
    for epoch in range(start_epoch, epochs + 1):
        model.train()
        watch = common.Stopwatch()
        total, count, seen = 0.0, 0, []
        batches = train_shard.iter_torch_batches(
            batch_size=batch_size, prefetch_batches=prefetch, device=device,
            local_shuffle_buffer_size=shuffle_buffer, local_shuffle_seed=epoch if shuffle_buffer else None,
        )
        step = -1
        for batch in batches:
            watch.data_done()
            xb, yb = batch["x"], batch["y"]  # (B, F) float32, (B,) int64
            seen += batch["row_id"].tolist()
            if len(yb) < 2:  # batch norm needs 2 rows; equal shards make every rank skip the same batch
                watch.compute_done()
                continue
            step += 1
            loss = loss_fn(model(xb), yb) / accum  # (B, C) logits vs (B,) labels
            loss.backward()
            if (step + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
            total += float(loss.detach()) * accum * len(yb)
            count += len(yb)
            watch.compute_done()
        optimizer.step()  # flush a partial accumulation window
        optimizer.zero_grad()

        model.eval()
        with torch.no_grad():
            out = model(x_va)  # (N, C)
            sums = torch.tensor([float(loss_fn(out, y_va)) * len(y_va), float((out.argmax(1) == y_va).sum()),
                                 len(y_va), total, count], dtype=torch.float64)
        sums = _all_reduce(sums)  # [val loss sum, correct, val rows, train loss sum, train rows] over ranks
        # Every rank's row ids, gathered on every rank: proof of disjoint shards, cheap on small data only.
        track = bool(config.get("track_rows", True))
        evidence = shard_evidence(_all_gather(seen), settings.val_fraction) if track else {}

        metrics = {
            "train/loss": float(sums[3] / max(float(sums[4]), 1.0)),
            "val/loss": float(sums[0] / max(float(sums[2]), 1.0)),
            "val/acc": float(sums[1] / max(float(sums[2]), 1.0)),
            "epoch": epoch,
            "opt/lr": optimizer.param_groups[0]["lr"],
            "opt/grad_accum_steps": accum,
            "sys/world_size": world,
            "sys/torch_threads": torch.get_num_threads(),
            **watch.metrics(),
            **evidence,
            **restored,
        }
        restored = {}
        with common.checkpoint_dir(rank, epoch, every, spot) as d:
            checkpoint = None
            if d is not None:
                meta = {"epoch": epoch, "lr": lr, "val/acc": metrics["val/acc"], "val/loss": metrics["val/loss"],
                        "trial_id": config.get(common.TRIAL_ID_KEY)}
                common.save_checkpoint(d, model, optimizer, meta)
                checkpoint = ray.train.Checkpoint.from_directory(d)
            ray.train.report({**metrics, **spot.metrics(epoch)}, checkpoint=checkpoint)
