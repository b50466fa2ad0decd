"""Plain Ray Train training functions: no Hydra, no MLflow.

The contract every trainable here follows (see README "Add your own trainable"):

- ``train_loop(config: dict) -> None`` runs on every Ray Train worker. ``config`` holds the trial's
  sampled hyperparameters plus the trainable's fixed settings.
- Once per epoch it calls ``ray.train.report(metrics, checkpoint=...)`` on every rank (rank 0 passes the
  checkpoint), with metric names like ``val/loss``, ``val/acc``, and ``epoch``.
- It resumes from :func:`trainables.common.resume_checkpoint` (a Train restart or a checkpoint handed over by
  Tune: PBT exploit, retry, resume) and applies the trial's *current* hyperparameters after restoring.
- ``build_model(config) -> torch.nn.Module`` rebuilds the model so a checkpoint can be promoted.
"""
