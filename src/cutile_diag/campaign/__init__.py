"""Campaigns: every kernel a test suite launches, ranked and optimised (above ``loop``).

    campaign.api.campaign(CampaignRequest(command=[...], root, out, ...), echo=...) -> CampaignResult
    campaign.api.resume(out, executor=..., echo=...) -> CampaignResult

``survey`` (the command under the launch observer, incremental) -> ``plan`` (kernels,
configurations, derived commands, ranking) -> ``run`` + ``executors`` (the loops) ->
``report`` (campaign.md / campaign.html).
"""
