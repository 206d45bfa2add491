"""Stage 4 — diagnosis: evidence -> bottleneck class -> ranked playbook recommendations.

* ``evidence``   — the ``Evidence`` store, the fact vocabulary (``FACTS``) and collector entry points
* ``collect_ir`` / ``collect_capture`` / ``collect_gpu`` — the collectors
* ``predicates`` — the safe three-valued evaluator for playbook ``applies_when`` strings
* ``classes``    — bottleneck classes and the rules that pick one
* ``playbook``   — loading ``references/playbook/*.toml``
* ``engine``     — ``diagnose(evidence, tried=...) -> Diagnosis``
"""
from .engine import Diagnosis, Recommendation, diagnose
from .evidence import FACTS, Evidence, Fact, Site, collect_capture, collect_gpu, collect_tileir

__all__ = ["Diagnosis", "Recommendation", "diagnose", "Evidence", "Fact", "Site", "FACTS",
           "collect_tileir", "collect_capture", "collect_gpu"]
