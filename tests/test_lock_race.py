"""The promotion lock's one race MLflow's SQL store answers oddly, with a real store. Fast tier.

Two promoters insert the lock model at once; the loser's ``create_registered_model`` looks the winner's model up
to say "already exists", and when the winner has released in between, MLflow answers RESOURCE_DOES_NOT_EXIST
instead. The loser must try again, not fail its promote (seen in CI: two promoters in namespaces, 4 rounds each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeps.registry import lock


def test_an_insert_lost_to_a_holder_that_released_at_once_is_tried_again(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    real = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")

    class ReleasedInBetween:
        """The real client; its first create_registered_model meets the race: the insert clashed with a holder's
        model that was deleted before MLflow's store looked it up (the store's own code path, replayed)."""

        raced = False

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def create_registered_model(self, name: str, **kw: Any) -> Any:
            if not self.raced:
                self.raced = True
                real.create_registered_model(name)  # the other promoter's lock ...
                real.delete_registered_model(name)  # ... released at once
                return real.get_registered_model(name)  # the store's lookup after its unique-key clash
            return real.create_registered_model(name, **kw)

    c = ReleasedInBetween()
    held = lock.acquire(c, "m", "champion", wait_s=10)
    assert c.raced and held.waited_s < 10
    assert real.get_registered_model(lock.lock_name("m", "champion")).tags[lock.TAG_TOKEN]
    lock.release(held)
