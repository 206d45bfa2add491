"""Stage 4 — diagnosis: evidence -> bottleneck class -> ranked playbook recommendations.

* ``evidence``   — the ``Evidence`` store and the fact vocabulary (``FACTS``)
* ``collect_ir`` / ``collect_capture`` / ``collect_gpu`` — the collectors (they depend on ``evidence``,
  never the other way round)
* ``predicates`` — the safe three-valued evaluator for playbook ``applies_when`` strings
* ``classes``    — bottleneck classes and the rules that pick one
* ``playbook``   — loading ``references/playbook/*.toml``
* ``engine``     — ``diagnose(evidence, tried=...) -> Diagnosis``
"""
from .engine import Diagnosis, Recommendation, diagnose
from .collect_capture import collect_capture
from .collect_gpu import collect_gpu
from .collect_ir import collect_tileir
from .evidence import FACTS, Evidence, Fact, Site

__all__ = ["Diagnosis", "Recommendation", "diagnose", "Evidence", "Fact", "Site", "FACTS",
           "collect_tileir", "collect_capture", "collect_gpu"]
