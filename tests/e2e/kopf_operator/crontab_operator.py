"""A small kopf operator, written from kopf's documentation, that the e2e test runs against a
real `ephemera up` unchanged: handlers for the creation, update and deletion of CronTabs
(stable.example.com/v1) that patch the object's status and post Events. Deleting a CronTab
waits for the delete handler (kopf's finalizer), which records the name in the file named by
$CRONTAB_DELETED_LOG."""

from __future__ import annotations

import os
from typing import Any

import kopf

GROUP, VERSION, PLURAL = "stable.example.com", "v1", "crontabs"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 30
    settings.watching.client_timeout = 40
    settings.posting.level = 20  # INFO: kopf.info() and handler outcomes become Events


@kopf.on.create(GROUP, VERSION, PLURAL)
def created(spec: Any, name: str, body: Any, patch: kopf.Patch, **_: Any) -> dict[str, Any]:
    kopf.info(body, reason="Scheduled", message=f"{name} runs {spec['image']}")
    patch.status["phase"] = "Scheduled"
    return {"image": spec["image"]}  # kept as status.created by kopf


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.image")
def image_changed(old: Any, new: Any, body: Any, patch: kopf.Patch, **_: Any) -> None:
    kopf.info(body, reason="ImageChanged", message=f"{old} -> {new}")
    patch.status["phase"] = "Updated"
    patch.status["image"] = new


@kopf.on.delete(GROUP, VERSION, PLURAL)
def deleted(name: str, namespace: str, **_: Any) -> None:
    with open(os.environ["CRONTAB_DELETED_LOG"], "a") as log:
        log.write(f"{namespace}/{name}\n")
