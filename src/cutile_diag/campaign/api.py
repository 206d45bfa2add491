"""The campaign's entry points: one typed request in, one result out (``commands/campaign.py``
turns flags into these)."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..errors import CutileDiagError, UsageError
from ..loop import spares
from ..loop.api import LoopOverrides
from ..loop.backends.simulated import SimSpec
from ..loop.git import Git
from ..loop.session import branch_name, owned_folder
from ..roofline.device import live_device, preset
from ..measure.ceilings import device_ceilings
from .executors import make_executor
from .executors.ray import check_ray
from .plan import CampaignPlan, KernelPlan, build_plan, check_test_commands, select
from .report import write_report
from .run import STATE_FILE, Campaign, own_out, run_campaign
from .survey import survey

Echo = Callable[[str], None] | None


@dataclass
class CampaignRequest:
    """The ``campaign`` command's request: the survey command, where state goes, which kernels, and how the loops run.
    The ``campaign`` command's request: the survey command, where state goes, which kernels, and how the loops run."""
    command: list[str]
    root: Path                                   # the user's repository
    out: Path                                    # state + report
    plan_only: bool = False
    execute: bool = True                         # False: the survey records without executing (dry run / simulate)
    select: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    simulate: dict | None = None                 # kernel name -> `optimize --simulate` spec
    time_limit: float | None = None
    baselines_first: bool = False                # every kernel's baseline before any loop takes a step
    resurvey: bool = False
    device: str | None = None                    # a preset for the ranking (dry run)
    options: LoopOverrides = field(default_factory=LoopOverrides)  # for every loop
    max_tests: int | None = None                 # bench each kernel with its N perf tests of the most GPU time
    test_k: str | None = None                    # the correctness command's -k, instead of the derived one
    executor: str = "local"
    ray_address: str | None = None
    num_gpus: int | None = None
    gpus: str | int | None = None                # the local executor's --gpus N|all (default 1: this process)
    replay: bool = True                          # record launches in the survey; loops check and time on them
    branch_prefix: str | None = None             # each loop's branch: PREFIX-<kernel>-<date> (default cutile-perf)


@dataclass
class CampaignResult:
    """A campaign's outcome: its plan and the selected kernels, with the survey (``--plan``) or the report (a run)."""
    out: Path
    plan: CampaignPlan | None
    selected: list[KernelPlan]
    survey: dict | None = None
    report: dict | None = None


def _device(req: CampaignRequest):
    if req.device:
        dev = preset(req.device)
        return dev, device_ceilings(dev)
    if not req.execute:
        return None, None
    import torch
    if not torch.cuda.is_available():
        raise UsageError("a campaign times its kernels on a CUDA GPU and none is visible",
                         hint="--plan --dry-run ranks from static counts; --simulate SPECS.json runs simulated loops")
    dev = live_device()
    return dev, device_ceilings(dev, measure=True)


def check_time_limit(seconds: float | None) -> None:
    """Refuse a ``--time-limit`` that is not a positive, finite number of seconds (a usage error)."""
    if seconds is not None and not (seconds > 0 and math.isfinite(seconds)):
        raise UsageError(f"--time-limit must be a positive number of seconds, not {seconds:g}")


def check_inputs(req: CampaignRequest) -> None:
    """Everything a run needs that can be checked before anything runs (one line, exit 2), rather
    than found by each kernel's loop: the time limit, the loop options, the simulation specs, the
    spare-process count, the branch prefix and a clean git checkout."""
    check_time_limit(req.time_limit)
    req.options.apply()                                  # LoopOptions validates every loop option
    spares.wanted(0)
    for name, spec in (req.simulate or {}).items():
        try:
            SimSpec.from_json(spec)
        except CutileDiagError as e:
            raise UsageError(f"--simulate: {name}: {e.message}", hint=e.hint) from None
    if req.branch_prefix is not None:
        branch_name("k", prefix=req.branch_prefix)       # refuses a name git would not take
    if not (req.root / ".git").exists():
        raise UsageError(f"{req.root} is not a git repository: every kernel's loop works on a branch of it",
                         hint="run the campaign from the repository's root (--plan works anywhere)")
    own = owned_folder(req.root, req.out / "loops")
    Git(req.root, (own,) if own else ()).require_clean()


# A campaign exists to take a suite towards its roof within its time limit: its loops go on past small steps while
# below this fraction of the time attainable at the kernel's size (an H100 campaign stopped every loop after one
# < 2 % step with 200 s of its limit left and a kernel at 65 %); --until-roof sets another fraction.
CAMPAIGN_UNTIL_ROOF = 0.9


def campaign(req: CampaignRequest, *, echo: Echo = None) -> CampaignResult:
    """Survey the command, plan and rank its kernels, then (unless ``plan_only``) run the loop on each selected one
    and write the report; inputs are checked before anything runs.  The loops' ``until_roof`` defaults to
    ``CAMPAIGN_UNTIL_ROOF``."""
    say = echo or (lambda _m: None)
    if req.options.until_roof is None:
        req.options = replace(req.options, until_roof=CAMPAIGN_UNTIL_ROOF)
    if (req.out / STATE_FILE).exists() and not req.plan_only:
        raise UsageError(f"{req.out} already holds a campaign",
                         hint="continue it with --resume, or give --out FOLDER for a new one")
    # --gpus more than this machine has is refused at once, before any other input is checked
    ex = make_executor(req.executor, ray_address=req.ray_address, num_gpus=req.num_gpus, gpus=req.gpus,
                       simulated=req.simulate is not None)
    if not req.plan_only:
        check_inputs(req)
    if req.executor == "ray":
        check_ray()
    dev, ceilings = _device(req)
    req.out.mkdir(parents=True, exist_ok=True)
    own_out(req.root, req.out)
    sv = survey(req.command, req.out, execute=req.execute, echo=say, fresh=req.resurvey, replay=req.replay,
                max_tests=req.max_tests)
    plan = _plan(req, sv, dev, ceilings, say)
    chosen = select(plan, req.select, req.skip)
    if req.plan_only:
        return CampaignResult(req.out, plan, chosen, survey=sv.to_json())
    if not chosen:
        raise UsageError("no kernel to optimise", hint="see --plan: every kernel is skipped or has a problem")
    bad = [k for k in chosen if not k.ok]
    if bad:
        raise UsageError(f"{bad[0].name} cannot be optimised: {'; '.join(bad[0].problems)}", hint="--skip it")
    sims = None
    if req.simulate is not None:
        missing = [k.name for k in chosen if k.name not in req.simulate]
        if missing:
            raise UsageError(f"--simulate: no spec for {', '.join(missing)}",
                             hint="the file maps each kernel's name to a spec; kernels: "
                                  + ", ".join(k.name for k in chosen))
        sims = {}
        for k in chosen:
            p = req.out / "simulate" / f"{k.name}.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(req.simulate[k.name], indent=1))
            sims[k.name] = str(p)
    c = Campaign.create(req.out, plan, chosen, time_limit=req.time_limit, simulate=sims, options=req.options.to_json(),
                        executor=ex.describe(), baselines_first=req.baselines_first, replay=req.replay,
                        branch_prefix=req.branch_prefix)
    c.data["roof_device"] = (next(iter(req.simulate.values())).get("device", "h200") if req.simulate
                             else (req.device or ("live" if req.execute else None)))
    c.save()
    return _run(c, ex, plan, chosen, say)


def _plan(req: CampaignRequest, sv, dev, ceilings, say) -> CampaignPlan:
    """The plan of this survey: built once (static counts take a while), then read back from
    ``<out>/plan.json`` while the survey and the plan's options are the same."""
    key = {"command": sv.command, "executed": sv.executed, "launches": len(sv.records), "runs": len(sv.runs),
           "max_tests": req.max_tests, "test_k": req.test_k, "device": dev.name if dev is not None else None}
    path = req.out / "plan.json"
    if path.is_file():
        d = json.loads(path.read_text())
        if d.get("key") == key:
            say("plan: reused from an earlier run of this survey")
            return CampaignPlan.from_json(d["plan"])
    say("plan: static counts per kernel and configuration")
    t0 = time.monotonic()
    plan = build_plan(sv, req.root, device=dev, ceilings=ceilings, on_step=lambda m: say(f"plan: {m}"),
                      max_tests=req.max_tests, test_k=req.test_k)
    t1 = time.monotonic()
    check_test_commands(plan, sv.command, req.root, test_k=req.test_k, on_step=lambda m: say(f"plan: {m}"))
    say(f"plan: static counts in {t1 - t0:.1f} s, correctness commands checked in {time.monotonic() - t1:.1f} s")
    plan.kernels.sort(key=lambda k: not k.ok)            # a kernel with a problem goes last, as build_plan ranks
    path.write_text(json.dumps({"key": key, "plan": plan.to_json()}, indent=1))
    return plan


def _run(c: Campaign, ex, plan: CampaignPlan, chosen: list[KernelPlan], say) -> CampaignResult:
    try:
        run_campaign(c, ex, echo=say)
    finally:
        rep = write_report(c)
        say(f"report: {rep['html']}")
    return CampaignResult(c.out, plan, chosen, report=rep)


def resume(out: Path, *, executor: str | None = None, ray_address: str | None = None, num_gpus: int | None = None,
           gpus: str | int | None = None, time_limit: float | None = None, baselines_first: bool = False,
           echo: Echo = None) -> CampaignResult:
    """Continue the campaign in ``out``: crashed kernels run again, with the executor, GPUs and time limit given now
    (or those it started with)."""
    check_time_limit(time_limit)
    spares.wanted(0)
    c = Campaign.load(out)
    if time_limit is not None:               # this run may take time_limit more seconds
        c.data["time_limit_s"] = c.data["spent_s"] + time_limit
    if baselines_first:                      # from now on (the baselines not yet measured come first)
        c.data["baselines_first"] = True
    own_out(Path(c.plan.root), out)          # a repository made again (another machine) excludes it again
    retried = c.retry_crashed()
    if retried:
        (echo or (lambda _m: None))(f"campaign: {', '.join(retried)} crashed before: run again")
    name = executor or c.data["executor"].get("executor", "local")
    if gpus is None and name == c.data["executor"].get("executor", "local"):
        gpus = c.data["executor"].get("gpus")       # as many as the campaign started with
    ex = make_executor(name, ray_address=ray_address, num_gpus=num_gpus, gpus=gpus, simulated=bool(c.data["simulate"]))
    c.data["executor"] = ex.describe()
    if c.data.get("roof_device") == "live":
        # the loops place their points against this machine's measured ceilings (measured once, cached)
        device_ceilings(live_device(), measure=True)
    plan = c.plan
    return _run(c, ex, plan, [plan.kernel(n) for n in c.data["selected"]], echo or (lambda _m: None))
