"""The garbage collector, as upstream's `pkg/controller/garbagecollector`: a graph of owners
and dependents built from `metadata.ownerReferences` of every served resource (`graph`),
fed by one informer per resource found through discovery, and the workers that delete
dependents whose owners are gone, delete dependents first for owners deleted in the
foreground and orphan the dependents of owners deleted with `Orphan` (`collector`).
"""

from ephemera.controllers.garbagecollector.collector import GarbageCollector

__all__ = ["GarbageCollector"]
