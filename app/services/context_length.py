"""The one check of a request's length against its model's context (``max_position_embeddings``,
rope-scaled when the config says so: :func:`app.core.catalog.hf_config.context_limit`).

A request whose prompt and output together exceed it describes no run any engine serves (vLLM
refuses a prompt beyond ``max_model_len``): a 422 naming the field and the limit. Searches take
their lengths from the request, so no searched configuration can pick a longer one.
"""

from __future__ import annotations

from app.core.catalog import ModelArchitecture


def check_context_length(request: object, model: ModelArchitecture) -> None:
    """``input_length + output_length`` of a workload request, ``context_length +
    query_length`` of a forward, within ``model``'s context (else a domain error)."""
    output = getattr(request, "output_length", None)
    if isinstance(output, int):
        prompt = int(getattr(request, "input_length", 0))
        model.check_context(
            field="input_length",
            value=prompt,
            tokens=prompt + output,
            what="input_length + output_length",
        )
        return
    query = getattr(request, "query_length", None)
    if isinstance(query, int):
        cached = int(getattr(request, "context_length", 0))
        model.check_context(
            field="query_length",
            value=query,
            tokens=cached + query,
            what="context_length + query_length",
        )
