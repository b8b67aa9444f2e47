"""What envcheck's pulls hold on the engine's disk, counted as the engine counts what removing
them would free: each layer once, and only layers no other image holds.

The engine's ``GET /system/df`` gives per image its ``Size`` (all its layers), its
``SharedSize`` (those layers another image also holds) and ``Containers`` (how many use it,
running or not). An image that shares nothing counts its ``Size``. For one that shares, its
layers are listed (the image's ``RootFS.Layers`` beside its history, whose steps give each
layer's bytes) so that a base layer two of envcheck's pulls share counts once, and one an
image envcheck did not pull also holds counts nothing (removing envcheck's pulls would not
free it). A layer is known by the chain of layers up to it and the history that made it.
Layer lists are cached per image id (an image's layers never change).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

__all__ = ["DiskFootprint", "EngineLayers", "ImageDisk", "LayerCache", "footprint"]

Layers = tuple[tuple[str, int], ...]  # (layer key, bytes), oldest first


@dataclass(frozen=True, slots=True)
class ImageDisk:
    image_id: str
    size: int
    shared: int
    containers: int
    layers: Layers | None  # listed only for an image that shares layers


@dataclass(frozen=True)
class DiskFootprint:
    """One look at the engine's disk: every image's sizes, and the layers held by images not
    in ``ours`` (the set it was taken for)."""

    images: dict[str, ImageDisk]
    ours: frozenset[str]
    foreign_layers: frozenset[str]

    def usage(self, ours: Iterable[str] | None = None) -> int:
        """What removing ``ours`` (default: the set this look was taken for; a subset of it
        for "after evicting these") would free."""
        counted: set[str] = set()
        total = 0
        for image_id in (self.ours if ours is None else ours):
            disk = self.images.get(image_id)
            if disk is None:
                continue
            if disk.shared <= 0 or disk.layers is None:
                total += disk.size
                continue
            for key, size in disk.layers:
                if key not in counted and key not in self.foreign_layers:
                    counted.add(key)
                    total += size
        return total

    def in_use(self, image_id: str) -> bool:
        disk = self.images.get(image_id)
        return disk is not None and disk.containers > 0


class LayerCache:
    """Layer lists by image id, bounded (least recently asked for dropped first)."""

    def __init__(self, capacity: int = 8192) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._layers: OrderedDict[str, Layers] = OrderedDict()

    def layers(self, api: docker.APIClient, image_id: str) -> Layers | None:
        with self._lock:
            found = self._layers.get(image_id)
            if found is not None:
                self._layers.move_to_end(image_id)
                return found
        try:
            listed = _layers(api.inspect_image(image_id), api.history(image_id))
        except docker.errors.NotFound:
            return None
        with self._lock:
            self._layers[image_id] = listed
            while len(self._layers) > self._capacity:
                self._layers.popitem(last=False)
        return listed


class EngineLayers:
    """Called: the layers (uncompressed digests) of every image on the engine now, which a
    pull of an image sharing them does not move (``sizes.ManifestSizes.local_layers``). An
    image's layers never change: each is inspected once while it stays on the engine."""

    def __init__(self, api: docker.APIClient) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._image_layers: dict[str, tuple[str, ...]] = {}

    def __call__(self) -> frozenset[str]:
        ids = [str(image.get("Id")) for image in self._api.images(all=True)]
        held: set[str] = set()
        for image_id in ids:
            with self._lock:
                layers = self._image_layers.get(image_id)
            if layers is None:
                try:
                    attrs = self._api.inspect_image(image_id)
                except docker.errors.NotFound:
                    continue
                layers = tuple((attrs.get("RootFS") or {}).get("Layers") or [])
                with self._lock:
                    self._image_layers[image_id] = layers
            held.update(layers)
        with self._lock:
            for gone in set(self._image_layers) - set(ids):
                del self._image_layers[gone]
        return frozenset(held)


def footprint(api: docker.APIClient, ours: Iterable[str], layer_cache: LayerCache
              ) -> DiskFootprint:
    """The engine's disk as ``/system/df`` sees it now, for the images ``ours``."""
    mine = frozenset(ours)
    images: dict[str, ImageDisk] = {}
    foreign: set[str] = set()
    df_images = list(_df(api).get("Images") or [])
    sharing_mine = any(int(img.get("SharedSize") or 0) > 0
                       for img in df_images if img.get("Id") in mine)
    for img in df_images:
        image_id = str(img.get("Id"))
        shared = max(int(img.get("SharedSize") or 0), 0)
        layers = None
        # layers matter only where something is shared, and only if one of ours shares
        if shared > 0 and sharing_mine:
            layers = layer_cache.layers(api, image_id)
            if image_id not in mine and layers is not None:
                foreign.update(key for key, _ in layers)
        images[image_id] = ImageDisk(image_id, max(int(img.get("Size") or 0), 0), shared,
                                     max(int(img.get("Containers") or 0), 0), layers)
    return DiskFootprint(images, mine, frozenset(foreign))


# The engine runs one disk usage operation at a time and refuses another meanwhile ("a disk
# usage operation is already running"): this process' looks take turns, and one that meets
# another process' is asked again a little later.
_DF_LOCK = threading.Lock()
_DF_BUSY = "disk usage operation is already running"
DF_TRIES = 30


def _df(api: docker.APIClient) -> dict[str, Any]:
    with _DF_LOCK:
        for attempt in range(DF_TRIES):
            try:
                return dict(api.df())
            except docker.errors.APIError as exc:
                if _DF_BUSY not in str(exc) or attempt == DF_TRIES - 1:
                    raise
                time.sleep(min(0.05 * (attempt + 1), 0.5))
    raise AssertionError("unreachable")


def _layers(attrs: dict[str, Any], history: list[dict[str, Any]]) -> Layers:
    """Each layer that holds bytes, keyed by the layers up to it and the history that made
    it. The history lists build steps oldest last, layer or not; a step with bytes is a
    layer, taken in order. A layer of zero bytes is not told from a step without a layer,
    but it holds nothing to count; the history in the key keeps two images whose layer lists
    agree only by that shift from sharing a key."""
    diff_ids = list((attrs.get("RootFS") or {}).get("Layers") or [])
    steps = list(reversed(history))
    layers: list[tuple[str, int]] = []
    made: list[str] = []
    position = 0
    for step in steps:
        size = int(step.get("Size") or 0)
        made.append(f"{step.get('CreatedBy', '')}\x1f{step.get('Created', '')}\x1f{size}")
        if size <= 0:
            continue
        chain = diff_ids[:position + 1] if diff_ids else [attrs.get("Id", "")]
        key = hashlib.sha256("\x1e".join([*chain, "\x1d", *made]).encode()).hexdigest()
        layers.append((key, size))
        position += 1
    if not layers and int(attrs.get("Size") or 0) > 0:  # no usable history: one lump
        layers.append((str(attrs.get("Id")), int(attrs.get("Size") or 0)))
    return tuple(layers)
